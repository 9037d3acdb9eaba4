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

/** The fingerprint's input: the canonical JSON of a definition's parameters. */
export function canonicalParameters(definition) {
  const parts = [];
  if (definition.kind === "numeric") {
    parts.push(`"bounds":[${definition.bounds.map(pyFloat).join(",")}]`);
  }
  parts.push(`"bucket":${pyString(definition.bucket)}`);
  if (definition.kind === "categorical") {
    parts.push(`"categories":[${definition.categories.map(pyString).join(",")}]`);
  }
  parts.push(`"epsilon":${pyFloat(definition.epsilon)}`);
  parts.push(`"kind":${pyString(definition.kind)}`);
  parts.push(`"mechanism":${pyString(definition.resolved_mechanism)}`);
  parts.push(`"name":${pyString(definition.name)}`);
  parts.push(`"protocol":1`);
  return `{${parts.join(",")}}`;
}

/** 16 hex digits: SHA-256 of the canonical parameters (WebCrypto). */
export async function fingerprint(definition) {
  const bytes = new TextEncoder().encode(canonicalParameters(definition));
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}
