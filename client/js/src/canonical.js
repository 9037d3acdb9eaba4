// Fingerprints (docs/protocol.md, "Fingerprint"): the canonical JSON exactly as Python's
// json.dumps(sort_keys=True, separators=(",", ":")) writes it, hashed with SHA-256.

/** A string as Python's json writes it with ensure_ascii: pure ASCII. */
export function pyString(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0c) out += "\\f";
    else if (c === 0x0d) out += "\\r";
    else if (c < 0x20 || c > 0x7e) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += s[i];
  }
  return out + '"';
}

/** A float as Python's repr writes it (shortest round-trip digits). */
export function pyFloat(x) {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite number: ${x}`);
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exp] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const e = Number(exp);
  if (e >= -4 && e < 16) {
    if (e < 0) return `${sign}0.${"0".repeat(-e - 1)}${digits}`;
    const whole = digits.slice(0, e + 1).padEnd(e + 1, "0");
    const frac = digits.slice(e + 1) || "0";
    return `${sign}${whole}.${frac}`;
  }
  const rest = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const expSign = e < 0 ? "-" : "+";
  return `${sign}${rest}e${expSign}${String(Math.abs(e)).padStart(2, "0")}`;
}

/**
 * Which numbers of the fingerprint's input are floats (written as Python's repr writes
 * them: `1.0`, `1e-05`) and which are integers, by path (`*` for any list index). JSON
 * cannot tell `1.0` from `1` once parsed, so the client knows the schema; a number
 * anywhere else cannot be written canonically and the definition is refused.
 */
const FLOATS = new Set([
  "epsilon", "delta", "bounds.*", "scores.*.*",
  "mechanism_params.epsilon", "mechanism_params.bounds.*", "mechanism_params.views.*.weight",
  "mechanism_params.estimation_share",
]);
const INTEGERS = new Set([
  "protocol", "band",
  "mechanism_params.resolution", "mechanism_params.branching", "mechanism_params.views.*.size",
  "mechanism_params.max_length", "mechanism_params.k", "mechanism_params.seed", "mechanism_params.g",
  "mechanism_params.rows", "mechanism_params.estimation_rows", "mechanism_params.estimation_weight",
]);

export class CanonicalError extends Error {
  constructor(message) {
    super(message);
    this.name = "CanonicalError";
  }
}

/** Python's sort_keys order: by code point (not by UTF-16 unit, which differs past U+FFFF). */
function byCodePoint(a, b) {
  const x = [...a].map((c) => c.codePointAt(0));
  const y = [...b].map((c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** json.dumps(value, sort_keys=True, separators=(",", ":")) with the schema's number types. */
export function pyJson(value, path = "") {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return pyString(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") {
    if (FLOATS.has(path)) return pyFloat(value);
    if (INTEGERS.has(path)) {
      if (!Number.isSafeInteger(value)) throw new CanonicalError(`${path} must be an integer, got ${value}`);
      return String(value);
    }
    throw new CanonicalError(`a number at ${path || "the top"} is not in the schema of fingerprints`);
  }
  const at = (key) => (path ? `${path}.${key}` : key);
  if (Array.isArray(value)) return `[${value.map((v) => pyJson(v, at("*"))).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort(byCodePoint);
    return `{${keys.map((k) => `${pyString(k)}:${pyJson(value[k], at(k))}`).join(",")}}`;
  }
  throw new CanonicalError(`cannot write ${typeof value} at ${path}`);
}

/** The fingerprint's input: the canonical JSON of a definition's parameters. */
export function canonicalParameters(definition) {
  const params = {
    protocol: 1,
    name: definition.name,
    kind: definition.kind,
    mechanism: definition.resolved_mechanism,
    epsilon: definition.epsilon,
    bucket: definition.bucket,
  };
  if (definition.categories !== undefined) params.categories = definition.categories;
  // A categorical metric's order and score (the exponential mechanism's), when given.
  for (const key of ["ordered", "score", "band", "scores"]) {
    if (definition[key] !== undefined && definition[key] !== null) params[key] = definition[key];
  }
  if (definition.bounds !== undefined) params.bounds = definition.bounds;
  if (definition.delta) params.delta = definition.delta;
  if (definition.dimensions !== undefined) params.dimensions = definition.dimensions;
  if (definition.kind !== "categorical" && definition.kind !== "numeric") {
    const served = definition.mechanism_params;
    if (!served || typeof served !== "object" || Array.isArray(served)) {
      throw new CanonicalError(`metric ${definition.name}: no mechanism_params (collector too old?)`);
    }
    const mp = { ...served };
    // A hash seed is a 64-bit integer: JSON numbers lose it past 2^53, the served hex
    // in `derived` does not (and the fingerprint then vouches for it).
    if (definition.resolved_mechanism === "prefix_sketch" && "seed" in mp) mp.seed = BigInt(`0x${definition.derived?.seed}`);
    params.mechanism_params = mp;
  }
  return pyJson(params);
}

/** 16 hex digits: SHA-256 of the canonical parameters (WebCrypto). */
export async function fingerprint(definition) {
  const bytes = new TextEncoder().encode(canonicalParameters(definition));
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}
