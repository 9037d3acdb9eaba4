// The sampling rules of docs/protocol.md ("Sampling: how a client makes a report"):
// one report from a stream of uniform 32-bit words, every constant read from the
// definition's `derived` parameters (never recomputed from Math.exp).

const TWO32 = 4294967296;
const TWO53 = 9007199254740992;
const MASK64 = (1n << 64n) - 1n;

export const MECHANISMS = Object.freeze([
  "grr", "rr", "sue", "oue", "olh", "ss", "hr", "duchi", "piecewise", "hybrid", "laplace",
  "gaussian", "hh", "rollup", "levels", "joint", "joint_marginals", "prefix_sketch", "exponential",
  "square_wave",
]);
export const VIEW_MECHANISMS = new Set(["rollup", "levels", "joint", "joint_marginals"]);
export const CATEGORICAL = new Set(["grr", "rr", "sue", "oue", "olh", "ss", "hr", "exponential"]);

/** The platform CSPRNG: fills `bytes` (a typed array) in place. */
export const cryptoRandom = (bytes) => globalThis.crypto.getRandomValues(bytes);

/** Words from a random source (default: the platform CSPRNG), buffered. */
export class CryptoWords {
  constructor(size = 1024, random = cryptoRandom) {
    this.buffer = new Uint32Array(size);
    this.pos = size;
    this.random = random;
  }
  word() {
    if (this.pos >= this.buffer.length) {
      this.random(this.buffer);
      this.pos = 0;
    }
    return this.buffer[this.pos++];
  }
}

/** Words from a fixed list (test vectors, or a precomputed keystream). */
export class ListWords {
  constructor(words) {
    this.words = words;
    this.used = 0;
  }
  word() {
    if (this.used >= this.words.length) throw new WordsExhausted();
    return this.words[this.used++];
  }
}

export class WordsExhausted extends Error {
  constructor() {
    super("the word stream ran out");
    this.name = "WordsExhausted";
  }
}

/** A 64-bit threshold (16 hex digits) as its two 32-bit halves. */
export function threshold(hex) {
  if (typeof hex !== "string" || !/^[0-9a-f]{16}$/.test(hex)) {
    throw new TypeError(`a threshold must be 16 lowercase hex digits, got ${String(hex)}`);
  }
  return { hi: parseInt(hex.slice(0, 8), 16), lo: parseInt(hex.slice(8), 16) };
}

function coin(w, t) {
  const lo = w.word();
  const hi = w.word();
  return hi < t.hi || (hi === t.hi && lo < t.lo);
}

function uniform(w) {
  const lo = w.word();
  const hi = w.word();
  return (hi * 2097152 + (lo >>> 11)) / TWO53;
}

function u64(w) {
  const lo = w.word();
  const hi = w.word();
  return BigInt(lo) | (BigInt(hi) << 32n);
}

function below(w, n) {
  const limit = TWO32 - (TWO32 % n);
  for (;;) {
    const x = w.word();
    if (x < limit) return x % n;
  }
}

/** below(n) for a BigInt n >= 1: W words (the first least significant), n <= 2^(32 W). */
function belowBig(w, n) {
  let count = 1;
  while (1n << BigInt(32 * count) < n) count++;
  const span = 1n << BigInt(32 * count);
  const limit = span - (span % n);
  for (;;) {
    let v = 0n;
    for (let i = 0; i < count; i++) v |= BigInt(w.word()) << BigInt(32 * i);
    if (v < limit) return v % n;
  }
}

/** True with probability x / q (BigInt, 0 <= x <= q); no word at 0 or 1. */
function bernoulli(w, x, q) {
  if (x <= 0n) return false;
  if (x >= q) return true;
  return (q <= 4294967296n ? BigInt(below(w, Number(q))) : belowBig(w, q)) < x;
}

/** True with probability exp(-x / q), 0 <= x <= q: Canonne, Kamath, Steinke Algorithm 1. */
function taylor(w, x, q) {
  let k = 1n;
  while (bernoulli(w, x, q) && bernoulli(w, 1n, k)) k++;
  return k % 2n === 1n;
}

/** True with probability exp(-x / q) for any x >= 0: floor(x / q) coins of e^-1, then the rest. */
function expCoin(w, x, q) {
  for (let whole = x / q; whole > 0n; whole--) if (!taylor(w, 1n, 1n)) return false;
  return taylor(w, x % q, q);
}

/** Pr[L = l] ∝ exp(-|l| / t) (CKS Algorithm 2), t a BigInt. */
function discreteLaplace(w, t) {
  for (;;) {
    const u = t <= 4294967296n ? BigInt(below(w, Number(t))) : belowBig(w, t);
    if (!taylor(w, u, t)) continue;
    let v = 0n;
    while (taylor(w, 1n, 1n)) v++;
    const x = u + t * v;
    const negative = below(w, 2) === 1;
    if (negative && x === 0n) continue;
    return negative ? -x : x;
  }
}

/** Pr[Z = z] ∝ exp(-z^2 / (2 t m)) (CKS Algorithm 3), t and m BigInt. */
export function discreteGaussian(w, t, m) {
  const twoSigma2 = 2n * t * m;
  for (;;) {
    const z = discreteLaplace(w, t);
    const b = (z < 0n ? -z : z) - m;
    if (expCoin(w, b * b, twoSigma2)) return z;
  }
}

function popcount(x) {
  let c = 0;
  while (x) {
    x &= x - 1;
    c++;
  }
  return c;
}

/** OLH's hash: ((((a v + b) mod 2^64) >> 32) * g) >> 32, with a, b BigInt. */
export function olhBucket(v, a, b, g) {
  const h = ((a * BigInt(v) + b) & MASK64) >> 32n;
  return Number((h * BigInt(g)) >> 32n);
}

function rrItem(w, keep, d, x) {
  if (coin(w, keep)) return x;
  const other = below(w, d - 1);
  return other + (other >= x ? 1 : 0);
}

function uint32(value) {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value, true);
  return out;
}

function int32(value) {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, value, true);
  return out;
}

/**
 * A sampler for one definition: `sample(value, words)` gives the report bytes for a
 * mechanism input (a category index, or a number). Thresholds are parsed once.
 */
export function sampler(definition) {
  const name = definition.resolved_mechanism;
  const p = definition.derived;
  if (!p || typeof p !== "object") throw new TypeError(`metric ${definition.name}: no derived parameters`);
  if (CATEGORICAL.has(name)) return oracleSampler(name, p, definition.categories.length);
  if (VIEW_MECHANISMS.has(name)) return viewSampler(p);
  if (name === "hh") return hhSampler(p, definition.bounds);
  if (name === "prefix_sketch") return sketchSampler(p);
  return numericSampler(definition, name, p);
}

/** The rule of a frequency oracle over items 0 .. d - 1 (also nested in other kinds). */
export function oracleSampler(name, p, d) {
  {
    const bytes = (d + 7) >> 3;
    const bitmap = (bits) => {
      const out = new Uint8Array(bytes);
      for (let j = 0; j < d; j++) if (bits[j]) out[j >> 3] |= 1 << (j & 7);
      return out;
    };
    switch (name) {
      case "grr":
      case "rr": {
        const keep = threshold(p.keep);
        return (x, w) => uint32(rrItem(w, keep, d, x));
      }
      case "sue":
      case "oue": {
        const tp = threshold(p.p);
        const tq = threshold(p.q);
        return (x, w) => {
          const bits = new Uint8Array(d);
          bits[x] = coin(w, tp) ? 1 : 0;
          for (let j = 0; j < d; j++) if (j !== x) bits[j] = coin(w, tq) ? 1 : 0;
          return bitmap(bits);
        };
      }
      case "olh": {
        const g = p.g;
        const keep = threshold(p.keep);
        return (x, w) => {
          const a = u64(w);
          const b = u64(w);
          const y = rrItem(w, keep, g, olhBucket(x, a, b, g));
          const out = new Uint8Array(20);
          const view = new DataView(out.buffer);
          view.setBigUint64(0, a, true);
          view.setBigUint64(8, b, true);
          view.setUint32(16, y, true);
          return out;
        };
      }
      case "ss": {
        const k = p.k;
        const tin = threshold(p.in);
        return (x, w) => {
          const inside = coin(w, tin);
          const others = k - (inside ? 1 : 0);
          const chosen = new Set();
          for (let j = d - 1 - others; j < d - 1; j++) {
            const t = below(w, j + 1);
            chosen.add(chosen.has(t) ? j : t);
          }
          const bits = new Uint8Array(d);
          bits[x] = inside ? 1 : 0;
          for (const i of chosen) bits[i + (i >= x ? 1 : 0)] = 1;
          return bitmap(bits);
        };
      }
      case "exponential": {
        // u = u64(); the output is how many of row x's thresholds are <= u.
        const rows = p.cumulative.map((row) => row.map((t) => (threshold(t), BigInt(`0x${t}`))));
        return (x, w) => {
          const u = u64(w);
          let o = 0;
          for (const t of rows[x]) if (t <= u) o++;
          return uint32(o);
        };
      }
      case "hr": {
        const K = p.K;
        const keep = threshold(p.keep);
        return (x, w) => {
          const row = x + 1;
          let c = below(w, K);
          const want = coin(w, keep);
          const inside = popcount(row & c) % 2 === 0;
          if (inside !== want) c ^= row & -row;
          return uint32(c);
        };
      }
    }
  }
  throw new TypeError(`no sampling rule for oracle ${name}`);
}

function numericSampler(definition, name, p) {
  const [lo, hi] = definition.bounds;
  const unit = (x) => {
    const half = (hi - lo) / 2;
    return Math.min(Math.max((x - lo) / half - 1, -1), 1);
  };
  switch (name) {
    case "duchi": {
      const flip = threshold(p.flip);
      return (x, w) => Uint8Array.of(duchiSign(w, flip, unit(x)) === 1 ? 1 : 0xff);
    }
    case "piecewise": {
      const grid = pmGrid(p);
      return (x, w) => int32(pmIndex(w, grid, unit(x)));
    }
    case "hybrid": {
      const grid = pmGrid(p);
      const pm = threshold(p.pm);
      const flip = threshold(p.flip);
      const m = p.duchi_index;
      return (x, w) => {
        const t = unit(x);
        return int32(coin(w, pm) ? pmIndex(w, grid, t) : duchiSign(w, flip, t) * m);
      };
    }
    case "laplace": {
      const steps = p.grid_steps;
      const cap = p.cap;
      const digits = p.digits.map(threshold);
      const block = threshold(p.block);
      const blockSize = 2 ** digits.length;
      const geometric = (w) => {
        let g = 0;
        for (let j = 0; j < digits.length; j++) if (coin(w, digits[j])) g += 2 ** j;
        while (coin(w, block)) g += blockSize;
        return g;
      };
      return (x, w) => {
        const u = Math.min(Math.max(((x - lo) / (hi - lo)) * steps, 0), steps);
        let m = Math.floor(u);
        if (uniform(w) < u - m) m += 1;
        const g1 = geometric(w);
        const y = Math.min(Math.max(m + g1 - geometric(w), -cap), steps + cap);
        const out = new Uint8Array(8);
        new DataView(out.buffer).setBigInt64(0, BigInt(y), true);
        return out;
      };
    }
    case "square_wave": {
      // v on the unit scale; near = coin(near); u = uniform(); y in [-b, 1 + b]; its
      // bucket of d' (docs/protocol.md), as a uint16.
      const near = threshold(p.near);
      const b = p.band;
      const m = p.outputs;
      return (x, w) => {
        const c = Math.min(Math.max(x, lo), hi);
        const v = (c - lo) / (hi - lo);
        const inside = coin(w, near);
        const u = uniform(w);
        const y = inside ? v - b + 2 * b * u : u < v ? -b + u : u + b;
        const k = Math.min(Math.max(Math.floor(((y + b) / (1 + 2 * b)) * m), 0), m - 1);
        const out = new Uint8Array(2);
        new DataView(out.buffer).setUint16(0, k, true);
        return out;
      };
    }
    case "gaussian": {
      const steps = p.grid_steps;
      const cap = BigInt(p.cap);
      const t = BigInt(p.t);
      const sigma2OverT = BigInt(p.m);
      return (x, w) => {
        const u = Math.min(Math.max(((x - lo) / (hi - lo)) * steps, 0), steps);
        let m = Math.floor(u);
        if (uniform(w) < u - m) m += 1;
        let y = BigInt(m) + discreteGaussian(w, t, sigma2OverT);
        if (y < -cap) y = -cap;
        if (y > BigInt(steps) + cap) y = BigInt(steps) + cap;
        const out = new Uint8Array(8);
        new DataView(out.buffer).setBigInt64(0, y, true);
        return out;
      };
    }
  }
  throw new TypeError(`metric ${definition.name}: no sampling rule for mechanism ${name}`);
}

/** The leaf of a clipped value (docs/protocol.md, "Values"). */
export function leafOf(x, lo, hi, resolution) {
  const edge = (k) => (k === resolution ? hi : lo + ((hi - lo) * k) / resolution);
  let k = Math.min(Math.max(Math.floor(((x - lo) / (hi - lo)) * resolution), 0), resolution - 1);
  if (k < resolution - 1 && x >= edge(k + 1)) k += 1;
  if (x < edge(k)) k -= 1;
  return k;
}

function hhSampler(p, bounds) {
  const [lo, hi] = bounds;
  const depths = p.depths.map((depth) => ({ ...depth, sample: oracleSampler(depth.oracle, depth, depth.nodes) }));
  return (x, w) => {
    const leaf = leafOf(x, lo, hi, p.resolution);
    const t = below(w, depths.length);
    const depth = depths[t];
    const body = depth.sample(Math.floor(leaf / depth.leaves_per_node), w);
    const out = new Uint8Array(21);
    out[0] = t + 1;
    if (depth.oracle === "olh") out.set(body, 1);
    else out.set(body, 17);
    return out;
  };
}

function viewSampler(p) {
  const views = p.views.map((view) => ({ ...view, until: threshold(view.until), sample: oracleSampler(view.oracle, view, view.size) }));
  return (cell, w) => {
    const lo = w.word();
    const hi = w.word();
    let k = views.findIndex((v) => hi < v.until.hi || (hi === v.until.hi && lo < v.until.lo));
    if (k < 0) k = views.length - 1;
    const view = views[k];
    const body = view.sample(view.labels === null ? cell : view.labels[cell], w);
    const out = new Uint8Array(1 + p.payload);
    out[0] = k;
    out.set(body, 1);
    return out;
  };
}

const GOLDEN = 0x9e3779b97f4a7c15n;

function splitmix(seed, i) {
  let z = (seed + BigInt(i + 1) * GOLDEN) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

function sketchSampler(p) {
  const m = p.max_length;
  const nwords = Math.ceil((m + 1) / 4);
  const seed = BigInt(`0x${p.seed}`);
  const total = p.weights.reduce((a, b) => a + b, 0);
  const keep = threshold(p.keep);
  const scaled = (p.cut ?? "prefix") === "scaled";
  return (bytes, w) => {
    if (bytes.length > m) throw new RangeError(`a string of ${bytes.length} bytes is longer than max_length ${m}`);
    let slot = below(w, total);
    let sketch = 0;
    while (slot >= p.weights[sketch]) slot -= p.weights[sketch++];
    const row = below(w, sketch === 0 ? p.estimation_rows : p.rows);
    const at = sketch === 0 ? row : p.estimation_rows + (sketch - 1) * p.rows + row; // global row
    const key = new Uint8Array(4 * nwords);
    key[0] = bytes.length;
    key.set(bytes, 1);
    // bytes 0 .. kept of the key: level t keeps ceil(t len / m) bytes ("scaled"), or t ("prefix")
    const kept = sketch === 0 ? m : scaled ? Math.floor((sketch * bytes.length + m - 1) / m) : sketch;
    key.fill(0, kept + 1);
    const view = new DataView(key.buffer);
    const start = at * (nwords + 1);
    let acc = splitmix(seed, start);
    for (let i = 0; i < nwords; i++) acc = (acc + splitmix(seed, start + 1 + i) * BigInt(view.getUint32(4 * i, true))) & MASK64;
    const bucket = Number((((acc >> 32n) * BigInt(p.g)) >> 32n));
    return uint32(at * p.g + rrItem(w, keep, p.g, bucket));
  };
}

function duchiSign(w, flip, t) {
  const upper = uniform(w) < (t + 1) * 0.5;
  return upper !== coin(w, flip) ? 1 : -1;
}

function pmGrid(p) {
  return {
    outside: threshold(p.outside),
    cPlus1: p.c_plus_1,
    cMinus1: p.c_minus_1,
    step: p.step,
    c: p.c,
    wIn: p.w_in,
    wOut: p.w_out,
    bound: p.bound,
  };
}

function pmIndex(w, g, t) {
  const out = coin(w, g.outside);
  const u = uniform(w);
  let l = (0.5 * g.cPlus1 * t - 0.5 * g.cMinus1) / g.step;
  l = Math.min(Math.max(l, -g.c), g.c - g.wIn);
  let start;
  let offset;
  if (out) {
    const along = u * g.wOut;
    const left = l + g.c;
    if (along < left) {
      start = -g.c;
      offset = along;
    } else {
      start = l + g.wIn;
      offset = along - left;
    }
  } else {
    start = l;
    offset = u * g.wIn;
  }
  const anchor = Math.floor(start);
  const index = anchor + Math.floor(start - anchor + offset + uniform(w));
  return Math.min(Math.max(index, -g.bound), g.bound);
}
