// Metric definitions as served by GET /v1/metrics: checked before use, including that
// the served sampler constants (`derived`) give no more privacy loss than `epsilon`
// (a collector cannot weaken a device's privacy by serving other thresholds).

import { canonicalParameters, fingerprint } from "./canonical.js";
import { CATEGORICAL, MECHANISMS, sampler, threshold } from "./sampling.js";

export const NAME = /^[a-z][a-z0-9_.-]{0,63}$/;
export const PERIODS = { hour: 3600, day: 86400, week: 604800 };
// Relative slack when comparing sums of epsilons (1.0 + 0.1 + ... is not exact): the ledger
// admits a report when spent + epsilon <= budget (1 + BUDGET_SLACK) + BUDGET_SLACK.
export const BUDGET_SLACK = 1e-9;
const MAX_CATEGORIES = 65536;
const TOLERANCE = 1e-9; // relative slack between a served threshold and its formula

export class DefinitionError extends Error {
  constructor(message) {
    super(message);
    this.name = "DefinitionError";
  }
}

const prob = (hex) => {
  const t = threshold(hex);
  return (t.hi * 4294967296 + t.lo) / 18446744073709551616;
};

function near(served, formula, what, name) {
  if (!(Math.abs(served - formula) <= TOLERANCE * Math.max(formula, 1e-300))) {
    throw new DefinitionError(`metric ${name}: served ${what} ${served} is not ${formula}`);
  }
}

function integer(value, lo, hi, what, name) {
  if (!Number.isSafeInteger(value) || value < lo || value > hi) {
    throw new DefinitionError(`metric ${name}: ${what} must be an integer in ${lo}..${hi}`);
  }
  return value;
}

/** Python's round(): to the nearest integer, a half to the even one. */
function roundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The integer square root of a non-negative BigInt (Newton's method). */
function isqrt(n) {
  if (n < 2n) return n;
  let x = BigInt(Math.floor(Math.sqrt(Number(n))));
  while (x * x > n) x -= 1n;
  while ((x + 1n) * (x + 1n) <= n) x += 1n;
  return x;
}

/**
 * Each base cell's group in the view named `name` (docs/protocol.md, Derived parameters):
 * a hierarchy's `depth d` numbers the nodes at depth d in order of first appearance
 * among the leaves (a leaf above d stays itself); a table's `cells` is the cells, and an
 * attribute's view each cell's category of it (cells row-major, the first attribute
 * slowest).
 */
function viewLabels(def, name, cells) {
  if (def.kind === "hierarchy") {
    const d = /^depth ([1-9][0-9]*)$/.exec(name)?.[1];
    if (!d) throw new DefinitionError(`metric ${def.name}: unknown view ${JSON.stringify(name)}`);
    const sep = def.separator ?? "/";
    const index = new Map();
    return def.categories.map((leaf) => {
      const path = leaf.split(sep).slice(0, Number(d)).join(sep);
      if (!index.has(path)) index.set(path, index.size);
      return index.get(path);
    });
  }
  if (name === "cells") return Array.from({ length: cells }, (_, i) => i);
  const axis = def.dimensions.findIndex(([a]) => a === name);
  if (axis < 0) throw new DefinitionError(`metric ${def.name}: unknown view ${JSON.stringify(name)}`);
  const inner = def.dimensions.slice(axis + 1).reduce((n, [, c]) => n * c.length, 1);
  const size = def.dimensions[axis][1].length;
  return Array.from({ length: cells }, (_, i) => Math.floor(i / inner) % size);
}

/** The kind each mechanism serves (categorical and numeric: their own lists). */
const KIND_OF = { hh: "distribution", square_wave: "distribution", rollup: "hierarchy", levels: "hierarchy", joint: "table", joint_marginals: "table", prefix_sketch: "strings" };

/** The fingerprinted mechanism parameters (other kinds) agree with the served constants. */
function checkMechanismParams(def) {
  const mp = def.mechanism_params;
  const p = def.derived;
  const same = (a, b, what) => {
    if (JSON.stringify(a) !== JSON.stringify(b)) throw new DefinitionError(`metric ${def.name}: ${what} differs from the fingerprinted parameters`);
  };
  same(mp.mechanism, def.resolved_mechanism, "the mechanism");
  same(mp.epsilon, def.epsilon, "epsilon");
  switch (def.resolved_mechanism) {
    case "hh":
      same(mp.bounds, def.bounds, "bounds");
      same(mp.resolution, p.resolution, "resolution");
      break;
    case "square_wave":
      same(mp.bounds, def.bounds, "bounds");
      break;
    case "rollup":
    case "levels":
    case "joint":
    case "joint_marginals":
      same(
        (mp.views ?? []).map((v) => [v.name, v.oracle, v.size]),
        p.views.map((v) => [v.name, v.oracle, v.size]),
        "the views",
      );
      if (def.categories) same(mp.categories, def.categories, "categories");
      break;
    case "prefix_sketch":
      for (const key of ["max_length", "g", "rows", "estimation_rows"]) same(mp[key], p[key], key);
      same(mp.cut ?? "prefix", p.cut ?? "prefix", "cut");
      break;
  }
}

/** Check that the served constants realize the mechanism at the definition's epsilon. */
export function checkDerived(def) {
  const p = def.derived;
  switch (def.resolved_mechanism) {
    case "hh": {
      if (!Array.isArray(p.depths) || p.depths.length < 1 || p.depths.length > 64) throw new DefinitionError(`metric ${def.name}: bad depths`);
      integer(p.resolution, 2, 4096, "resolution", def.name);
      // Depth t's nodes hold b^(height - t) leaves (b the branching): 1 at the deepest.
      const b = p.depths.length > 1 ? p.depths.at(-2).leaves_per_node : 1;
      for (const [t, depth] of p.depths.entries()) {
        if (depth.leaves_per_node !== b ** (p.depths.length - 1 - t)) throw new DefinitionError(`metric ${def.name}: depth ${t + 1}'s leaves_per_node ${depth.leaves_per_node} is not ${b ** (p.depths.length - 1 - t)}`);
      }
      for (const depth of p.depths) {
        if (!["grr", "olh"].includes(depth.oracle)) throw new DefinitionError(`metric ${def.name}: bad depth oracle`);
        integer(depth.nodes, 2, 4096, "nodes", def.name);
        integer(depth.leaves_per_node, 1, 4096, "leaves_per_node", def.name);
        if (Math.ceil(p.resolution / depth.leaves_per_node) !== depth.nodes) throw new DefinitionError(`metric ${def.name}: depths do not fit the resolution`);
        checkOracle(def.name, def.epsilon, depth.oracle, depth, depth.nodes);
      }
      return;
    }
    case "rollup":
    case "levels":
    case "joint":
    case "joint_marginals": {
      const cells = def.categories ? def.categories.length : def.dimensions.reduce((n, [, c]) => n * c.length, 1);
      if (!Array.isArray(p.views) || p.views.length < 1 || p.views.length > 255) throw new DefinitionError(`metric ${def.name}: bad views`);
      const weights = (def.mechanism_params?.views ?? []).map((v) => v.weight);
      if (weights.length !== p.views.length || !weights.every((w) => Number.isFinite(w) && w > 0)) {
        throw new DefinitionError(`metric ${def.name}: the views' weights (mechanism_params) are missing`);
      }
      let cumulative = 0;
      for (const [k, view] of p.views.entries()) {
        // The view oracles (ldpkit's STRUCTURED_ORACLES): the collector refuses any other.
        if (!["grr", "sue", "oue", "ss"].includes(view.oracle)) throw new DefinitionError(`metric ${def.name}: ${view.oracle} is not a view oracle`);
        integer(view.size, 2, 1 << 24, "view size", def.name);
        // A view is drawn by its weight: `until` is the cumulative share as a threshold
        // (the last view's ffff...), recomputed from the fingerprinted weights.
        cumulative += weights[k];
        if (k === p.views.length - 1) {
          if (view.until !== "ffffffffffffffff") throw new DefinitionError(`metric ${def.name}: the last view's until must be ffffffffffffffff`);
        } else {
          near(prob(view.until), Math.min(cumulative, 1), `views[${k}].until`, def.name);
        }
        const labels = viewLabels(def, view.name, cells);
        const identity = labels.length === view.size && labels.every((l, i) => l === i);
        const served = view.labels;
        if (identity ? served !== null : !(Array.isArray(served) && served.length === labels.length && served.every((l, i) => l === labels[i]))) {
          throw new DefinitionError(`metric ${def.name}: the labels of view ${JSON.stringify(view.name)} are not its cells' ${identity ? "(null: the cells themselves)" : "groups"}`);
        }
        if (view.size !== Math.max(...labels) + 1) throw new DefinitionError(`metric ${def.name}: view ${JSON.stringify(view.name)} has ${Math.max(...labels) + 1} groups, not size ${view.size}`);
        checkOracle(def.name, def.epsilon, view.oracle, view, view.size);
      }
      // The payload holds the largest view report: GRR's u32, a bitmap's ceil(size / 8).
      const payload = Math.max(...p.views.map((v) => (v.oracle === "grr" ? 4 : Math.ceil(v.size / 8))));
      if (p.payload !== payload) throw new DefinitionError(`metric ${def.name}: served payload ${p.payload} is not ${payload}`);
      return;
    }
    case "prefix_sketch": {
      integer(p.max_length, 1, 64, "max_length", def.name);
      if (p.max_length !== def.max_length) throw new DefinitionError(`metric ${def.name}: max_length differs`);
      integer(p.rows, 1, 1 << 16, "rows", def.name);
      integer(p.estimation_rows, 1, 1 << 16, "estimation_rows", def.name);
      if (!/^[0-9a-f]{16}$/.test(p.seed)) throw new DefinitionError(`metric ${def.name}: bad seed`);
      if (!["prefix", "scaled"].includes(p.cut ?? "prefix")) throw new DefinitionError(`metric ${def.name}: unknown cut rule ${p.cut}`);
      // The estimation sketch's weight from its share of devices (round half to even, as
      // Python's round), then 1 per prefix level.
      const mp = def.mechanism_params ?? {};
      const share = mp.estimation_share;
      if (!(typeof share === "number" && share > 0 && share < 1)) throw new DefinitionError(`metric ${def.name}: bad estimation_share`);
      const first = Math.max(1, roundHalfEven((share * p.max_length) / (1 - share)));
      if (mp.estimation_weight !== first) throw new DefinitionError(`metric ${def.name}: estimation_weight ${mp.estimation_weight} is not ${first}`);
      const weights = [first, ...Array(p.max_length).fill(1)];
      if (!Array.isArray(p.weights) || p.weights.length !== weights.length || !p.weights.every((x, i) => x === weights[i])) {
        throw new DefinitionError(`metric ${def.name}: served sketch weights ${JSON.stringify(p.weights)} are not ${JSON.stringify(weights)}`);
      }
      checkOracle(def.name, def.epsilon, "olh", p, 0);
      return;
    }
    case "gaussian":
      checkGaussian(def);
      return;
    case "exponential":
      checkExponential(def);
      return;
    case "square_wave":
      checkSquareWave(def);
      return;
    default:
      checkOracle(def.name, def.epsilon, def.resolved_mechanism, p, def.categories ? def.categories.length : 0);
  }
}

const MAX_EXPONENTIAL_ITEMS = 64;

/** The exponential mechanism's score matrix q[x][o] from the definition (docs/protocol.md). */
function scoreMatrix(def) {
  const d = def.categories.length;
  if (d > MAX_EXPONENTIAL_ITEMS) throw new DefinitionError(`metric ${def.name}: too many categories for exponential`);
  const gap = (x, o) => Math.abs(x - o);
  const square = (f) => Array.from({ length: d }, (_, x) => Array.from({ length: d }, (_, o) => f(x, o)));
  if (def.score === "distance" && def.ordered === true && def.band == null && def.scores == null) return square((x, o) => -gap(x, o));
  if (def.score === "band" && def.ordered === true && def.scores == null) {
    integer(def.band, 0, d - 2, "band", def.name);
    return square((x, o) => (gap(x, o) <= def.band ? 1 : 0));
  }
  const q = def.scores;
  if (def.score === "matrix" && def.band == null && Array.isArray(q) && q.length === d && Array.isArray(q[0])) {
    const m = q[0].length;
    if (m >= d && m <= MAX_EXPONENTIAL_ITEMS && q.every((r) => Array.isArray(r) && r.length === m && r.every(Number.isFinite))) return q;
  }
  throw new DefinitionError(`metric ${def.name}: bad score for the exponential mechanism`);
}

/** log P[x][o] for P[x][o] proportional to exp(s q[x][o]), row by row (log-sum-exp). */
function logChannel(q, s) {
  return q.map((row) => {
    const a = row.map((v) => s * v);
    const top = Math.max(...a);
    let sum = 0;
    for (const v of a) sum += Math.exp(v - top);
    const lse = top + Math.log(sum);
    return a.map((v) => v - lse);
  });
}

/** The largest log-ratio of a channel given as log probabilities: per output, max - min. */
function privacyLoss(lp) {
  let loss = 0;
  for (let o = 0; o < lp[0].length; o++) {
    let hi = -Infinity;
    let lo = Infinity;
    for (const row of lp) {
      hi = Math.max(hi, row[o]);
      lo = Math.min(lo, row[o]);
    }
    loss = Math.max(loss, hi - lo);
  }
  return loss;
}

/** The exact calibration of docs/protocol.md: bisection on [eps / R, 2 eps / R]. */
export function exactScale(q, eps) {
  let r = 0;
  for (const x of q) {
    for (const y of q) {
      const diff = x.map((v, o) => v - y[o]);
      r = Math.max(r, Math.max(...diff) - Math.min(...diff));
    }
  }
  if (!(r > 0)) throw new DefinitionError("the score gives every input the same channel");
  let lo = eps / r;
  let hi = (2 * eps) / r;
  if (privacyLoss(logChannel(q, hi)) <= eps) return hi;
  for (let i = 0; i < 200; i++) {
    const mid = 0.5 * (lo + hi);
    if (mid === lo || mid === hi) break;
    if (privacyLoss(logChannel(q, mid)) <= eps) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * Verification of the exponential mechanism: the served cumulative thresholds are the
 * exact calibration's (relative 1e-9), nondecreasing, and the channel they give spends at
 * most epsilon (1 + 1e-9), every output possible for every input.
 */
function checkExponential(def) {
  const q = scoreMatrix(def);
  const d = q.length;
  const m = q[0].length;
  const served = def.derived.cumulative;
  if (!Array.isArray(served) || served.length !== d || !served.every((r) => Array.isArray(r) && r.length === m - 1)) {
    throw new DefinitionError(`metric ${def.name}: bad cumulative thresholds`);
  }
  const lp = logChannel(q, exactScale(q, def.epsilon));
  const channel = served.map((row, x) => {
    const t = [0n, ...row.map((h) => (threshold(h), BigInt(`0x${h}`))), 1n << 64n];
    let cum = 0;
    return t.slice(1).map((v, o) => {
      const step = v - t[o];
      if (step <= 0n) throw new DefinitionError(`metric ${def.name}: cumulative[${x}] is not increasing`);
      cum += Math.exp(lp[x][o]);
      if (o < m - 1) near(prob(row[o]), cum, `cumulative[${x}][${o}]`, def.name);
      return Math.log(Number(step) / 18446744073709551616);
    });
  });
  if (!(privacyLoss(channel) <= def.epsilon * (1 + TOLERANCE))) {
    throw new DefinitionError(`metric ${def.name}: the served channel spends more than epsilon ${def.epsilon}`);
  }
}

/**
 * Li et al.'s half-width b of the square wave on the unit scale, as ldpkit's optimal_band:
 * (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)), and below eps = 1 the numerator
 * and e^eps - 1 - eps summed as their series (30 terms), which do not cancel.
 */
export function squareWaveBand(eps) {
  if (eps < 1) {
    let term = 1;
    let top = 0;
    let bottom = 0;
    for (let k = 1; k <= 30; k++) {
      term *= eps / k;
      top += (k - 1) * term;
      bottom += k >= 2 ? term : 0;
    }
    return top / (2 * Math.exp(eps) * bottom);
  }
  const e = Math.exp(eps);
  return (eps * e - e + 1) / (2 * e * (e - 1 - eps));
}

/**
 * Verification of the square wave: `band` is the optimal half-width at epsilon (relative
 * 1e-9), `near` the threshold of the window's probability 2 b p (p = e^eps / (2 b e^eps + 1);
 * relative 1e-9, as every threshold), `outputs` the fingerprinted resolution; and the
 * served pair spends at most epsilon: the window's density near / (2 b) over the rest's
 * 1 - near is at most e^eps.
 */
function checkSquareWave(def) {
  const p = def.derived;
  const name = def.name;
  const mp = def.mechanism_params ?? {};
  for (const key of Object.keys(p)) {
    if (!["band", "near", "outputs"].includes(key)) throw new DefinitionError(`metric ${name}: served derived.${key} is a constant this client does not know`);
  }
  // d' is the fingerprinted resolution (mechanism_params keep hh's keys).
  const outputs = integer(mp.resolution, 2, 4096, "mechanism_params.resolution", name);
  if (p.outputs !== outputs) throw new DefinitionError(`metric ${name}: served derived.outputs ${p.outputs} is not the fingerprinted ${outputs} buckets`);
  if (typeof p.band !== "number" || !(p.band > 0 && p.band < 1)) throw new DefinitionError(`metric ${name}: served derived.band ${p.band} is not a half-width in (0, 1)`);
  const b = squareWaveBand(def.epsilon);
  near(p.band, b, "derived.band", name);
  const e = Math.exp(def.epsilon);
  let window;
  try {
    window = prob(p.near);
  } catch {
    throw new DefinitionError(`metric ${name}: served derived.near ${String(p.near).slice(0, 40)} is not a threshold`);
  }
  const q = 1 / (2 * b * e + 1);
  near(window, 2 * b * (q * e), "derived.near", name);
  if (!(window / (2 * p.band * (1 - window)) <= e * (1 + TOLERANCE))) {
    throw new DefinitionError(`metric ${name}: the served derived.near and derived.band spend more than epsilon ${def.epsilon}`);
  }
}

function checkOracle(name, eps, mechanism, p, d) {
  const e = Math.exp(eps);
  switch (mechanism) {
    case "grr":
    case "rr":
      near(prob(p.keep), e / (e + d - 1), "keep", name);
      break;
    case "sue": {
      const h = Math.exp(eps / 2);
      near(prob(p.p), h / (h + 1), "p", name);
      near(prob(p.q), 1 / (h + 1), "q", name);
      break;
    }
    case "oue":
      near(prob(p.p), 0.5, "p", name);
      near(prob(p.q), 1 / (e + 1), "q", name);
      break;
    case "olh":
      integer(p.g, 2, 4294967296, "g", name);
      near(prob(p.keep), e / (e + p.g - 1), "keep", name);
      break;
    case "ss":
      integer(p.k, 1, d - 1, "k", name);
      near(prob(p.in), (p.k * e) / (p.k * e + d - p.k), "in", name);
      break;
    case "hr":
      integer(p.K, d + 1, 2 * d + 2, "K", name);
      if (p.K & (p.K - 1)) throw new DefinitionError(`metric ${name}: K must be a power of 2`);
      near(prob(p.keep), e / (e + 1), "keep", name);
      break;
    case "duchi":
      near(prob(p.flip), 1 / (e + 1), "flip", name);
      near(p.scale, (e + 1) / (e - 1), "scale", name); // C: what a report of +-1 stands for
      break;
    case "piecewise":
    case "hybrid": {
      const h = Math.exp(eps / 2);
      const q = prob(p.outside);
      near(q, 1 / (h + 1), "outside", name);
      // The density ratio inside/outside is what privacy rests on: at most e^eps.
      const ratio = ((1 - q) / p.w_in) / (q / p.w_out);
      if (!(ratio <= e * (1 + TOLERANCE))) {
        throw new DefinitionError(`metric ${name}: the served grid gives a ratio above e^eps`);
      }
      near(p.c_plus_1 - p.c_minus_1, 2, "C+1 - (C-1)", name);
      near(p.c_plus_1 / p.c_minus_1, h, "(C+1)/(C-1)", name);
      near(p.w_in, p.c_minus_1 / p.step, "w_in", name);
      near(p.w_out, p.c_plus_1 / p.step, "w_out", name);
      // C = coth(eps / 4) in grid steps; the grid reaches ceil(c); scale is the step.
      near(p.c, 1 / Math.tanh(eps / 4) / p.step, "c", name);
      integer(p.bound, 1, 2 ** 30, "bound", name);
      if (p.bound !== Math.ceil(p.c)) throw new DefinitionError(`metric ${name}: served bound ${p.bound} is not ceil(c) = ${Math.ceil(p.c)}`);
      if (p.scale !== p.step) throw new DefinitionError(`metric ${name}: served scale ${p.scale} is not the step ${p.step}`);
      if (mechanism === "hybrid") {
        near(prob(p.flip), 1 / (e + 1), "flip", name);
        // PM's branch (ldpkit's HYBRID_THRESHOLD: Duchi's branch alone at eps <= 0.61).
        const pm = eps > 0.61 ? -Math.expm1(-eps / 2) : 0;
        if (pm === 0 ? p.pm !== "0000000000000000" : !(Math.abs(prob(p.pm) - pm) <= TOLERANCE * pm + 2 ** -52)) {
          throw new DefinitionError(`metric ${name}: served pm ${prob(p.pm)} is not ${pm}`);
        }
        integer(p.duchi_index, 1, p.bound, "duchi_index", name);
        // Duchi's outputs +-C_d sit on the grid: the step is C_d / duchi_index.
        near(p.step, (e + 1) / (e - 1) / p.duchi_index, "step (C_duchi / duchi_index)", name);
      }
      break;
    }
    case "laplace": {
      integer(p.grid_steps, 65536, 65536, "grid_steps", name);
      const lam = eps / p.grid_steps;
      if (!Array.isArray(p.digits) || p.digits.length > 64) {
        throw new DefinitionError(`metric ${name}: digits must be a list`);
      }
      p.digits.forEach((t, j) => near(prob(t), 1 / (1 + Math.exp(lam * 2 ** j)), `digit ${j}`, name));
      near(prob(p.block), Math.exp(-lam * 2 ** p.digits.length), "block", name);
      const blockRate = lam * 2 ** p.digits.length;
      if (!(blockRate >= Math.LN2 * 0.999 && blockRate < 2 * Math.LN2 * 1.001)) {
        throw new DefinitionError(`metric ${name}: the geometric's digits do not cover its scale`);
      }
      integer(p.cap, 1, 2 ** 52, "cap", name);
      // Reports are clamped 48 noise scales out (ldpkit's TAIL_CAP).
      if (p.cap !== Math.ceil(48 / lam)) throw new DefinitionError(`metric ${name}: served cap ${p.cap} is not ceil(48 / lambda) = ${Math.ceil(48 / lam)}`);
      break;
    }
    default:
      throw new DefinitionError(`metric ${name}: unknown mechanism ${mechanism}`);
  }
}

/** erfc(x) to about 1e-14 relative: the series of erf below 2, Lentz's continued fraction above. */
export function erfc(x) {
  if (x < 0) return 2 - erfc(-x);
  if (x < 2) {
    let term = x;
    let sum = x;
    for (let n = 1; Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= (-x * x) / n;
      sum += term / (2 * n + 1);
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * sum;
  }
  // erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))).
  const tiny = 1e-300;
  let f = x;
  let c = x;
  let d = 0;
  for (let n = 1; n < 500; n++) {
    const a = n / 2;
    d = x + a * d;
    d = 1 / (Math.abs(d) < tiny ? tiny : d);
    c = x + a / c;
    const delta = c * d;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}

/** Balle and Wang's delta of N(0, sigma^2) noise at sensitivity 1 (docs/statistics.md). */
export function gaussianDelta(epsilon, sigma) {
  const phi = (z) => 0.5 * erfc(-z / Math.SQRT2);
  const a = 1 / (2 * sigma);
  const b = epsilon * sigma;
  return Math.max(0, phi(a - b) - Math.exp(epsilon) * phi(-a - b));
}

function checkGaussian(def) {
  const p = def.derived;
  const name = def.name;
  if (typeof def.delta !== "number" || !(def.delta > 0 && def.delta < 1)) throw new DefinitionError(`metric ${name}: the Gaussian needs 0 < delta < 1`);
  integer(p.grid_steps, 65536, 65536, "grid_steps", name);
  integer(p.t, 1, Number.MAX_SAFE_INTEGER, "t", name);
  integer(p.m, 1, Number.MAX_SAFE_INTEGER, "m", name);
  integer(p.cap, 1, Number.MAX_SAFE_INTEGER, "cap", name);
  // t = floor(s) + 1 and m = ceil(s^2 / t) put m in t - 2 .. t (else the proposal is
  // far from the noise and rejection slow); privacy rests on sigma2 = t m alone.
  if (p.m > p.t || p.m < p.t - 2) throw new DefinitionError(`metric ${name}: t and m do not fit one noise parameter`);
  const sigma = Math.sqrt(p.t * p.m) / p.grid_steps; // in units of the bounds' width
  if (!(gaussianDelta(def.epsilon, sigma) <= def.delta)) {
    throw new DefinitionError(`metric ${name}: the served noise sigma2 = t m gives more than delta ${def.delta} at epsilon ${def.epsilon}`);
  }
  // Reports are clamped 40 sigma out: cap = isqrt(1600 t m - 1) + 1, in integers.
  const cap = isqrt(1600n * BigInt(p.t) * BigInt(p.m) - 1n) + 1n;
  if (BigInt(p.cap) !== cap) throw new DefinitionError(`metric ${name}: served cap ${p.cap} is not isqrt(1600 t m - 1) + 1 = ${cap}`);
}

/** A checked definition with its sampler, or a DefinitionError saying what is wrong. */
export async function prepare(raw) {
  if (!raw || typeof raw !== "object") throw new DefinitionError("a definition must be an object");
  const name = raw.name;
  if (typeof name !== "string" || !NAME.test(name)) throw new DefinitionError(`bad metric name ${String(name).slice(0, 80)}`);
  if (!MECHANISMS.includes(raw.resolved_mechanism)) {
    throw new DefinitionError(`metric ${name}: mechanism ${String(raw.resolved_mechanism)} is not supported by this client`);
  }
  const mechanism = raw.resolved_mechanism;
  const kind = CATEGORICAL.has(mechanism) ? "categorical" : KIND_OF[mechanism] ?? "numeric";
  if (raw.kind !== kind) throw new DefinitionError(`metric ${name}: kind does not fit its mechanism`);
  for (const key of ["epsilon", "budget"]) {
    if (typeof raw[key] !== "number" || !(raw[key] > 0 && raw[key] <= 50)) throw new DefinitionError(`metric ${name}: bad ${key}`);
  }
  if (raw.budget < raw.epsilon) throw new DefinitionError(`metric ${name}: budget ${raw.budget} is smaller than the epsilon of one report`);
  if (!(raw.bucket in PERIODS) || !(raw.budget_period in PERIODS)) throw new DefinitionError(`metric ${name}: bad bucket or budget_period`);
  const strings = (c) => Array.isArray(c) && c.length >= 2 && c.length <= MAX_CATEGORIES && c.every((x) => typeof x === "string" && x.length > 0);
  if (kind === "categorical" || kind === "hierarchy") {
    if (!strings(raw.categories)) throw new DefinitionError(`metric ${name}: bad categories`);
  } else if (kind === "numeric" || kind === "distribution") {
    const b = raw.bounds;
    if (!Array.isArray(b) || b.length !== 2 || !b.every(Number.isFinite) || !(b[0] < b[1])) throw new DefinitionError(`metric ${name}: bad bounds`);
  } else if (kind === "table") {
    const dims = raw.dimensions;
    if (!Array.isArray(dims) || dims.length < 1 || !dims.every((d) => Array.isArray(d) && typeof d[0] === "string" && strings(d[1]))) {
      throw new DefinitionError(`metric ${name}: bad dimensions`);
    }
  } else if (!Number.isSafeInteger(raw.max_length)) {
    throw new DefinitionError(`metric ${name}: bad max_length`);
  }
  if (!raw.derived || typeof raw.derived !== "object") throw new DefinitionError(`metric ${name}: no derived parameters (collector too old?)`);
  if (typeof raw.fingerprint !== "string" || !/^[0-9a-f]{16}$/.test(raw.fingerprint)) throw new DefinitionError(`metric ${name}: bad fingerprint`);
  // The fingerprint of every kind: the canonical JSON is rebuilt with the schema of each
  // kind's numbers (floats as Python writes them), then the sampler's constants must be
  // those the fingerprinted parameters name.
  let computed;
  try {
    computed = await fingerprint(raw);
  } catch (err) {
    throw new DefinitionError(`metric ${name}: cannot check the fingerprint: ${err.message}`);
  }
  if (raw.fingerprint !== computed) {
    throw new DefinitionError(`metric ${name}: fingerprint ${raw.fingerprint} is not that of its parameters (${computed})`);
  }
  try {
    if (raw.mechanism_params) checkMechanismParams(raw);
    checkDerived(raw);
  } catch (err) {
    if (err instanceof DefinitionError) throw err;
    throw new DefinitionError(`metric ${name}: bad derived parameters: ${err.message}`);
  }
  const def = { ...raw, sample: sampler(raw) };
  if (raw.categories) def.index = new Map(raw.categories.map((c, i) => [c, i]));
  if (kind === "table") def.axes = raw.dimensions.map(([axis, cats]) => ({ axis, index: new Map(cats.map((c, i) => [c, i])) }));
  return def;
}

/**
 * The most reports of a definition's version one device's ledger lets it queue for one
 * bucket: fresh reports within a budget window (budget / epsilon, with the ledger's
 * slack), times the budget windows a bucket spans (a memoized repeat is queued at most
 * once per bucket and memo window, and memo windows are budget windows). A device
 * token's batch carrying more of one version and bucket is refused (docs/protocol.md,
 * "Token roles"). Computed exactly as ldpkit's MetricDefinition.device_cap.
 */
export function deviceCap(def) {
  const budget = def.budget * (1 + BUDGET_SLACK) + BUDGET_SLACK;
  const fresh = Math.floor((budget / def.epsilon) * (1 + BUDGET_SLACK));
  return fresh * Math.max(1, Math.floor(PERIODS[def.bucket] / PERIODS[def.budget_period]));
}

/** A value for an error message: JSON (a string quoted), cut to 80 characters. */
const shownValue = (value) => {
  let text;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined; // a BigInt, a cycle
  }
  return String(text ?? value).slice(0, 80);
};

/** The mechanism input of a raw value: a category index, or the number clipped. */
export function encodeValue(def, value) {
  if (def.kind === "table") {
    if (!value || typeof value !== "object" || Array.isArray(value) || Object.keys(value).length !== def.axes.length) {
      throw new TypeError(`metric ${def.name} takes one category per attribute (${def.axes.map((a) => a.axis).join(", ")}), got ${shownValue(value)}`);
    }
    let cell = 0;
    for (const { axis, index } of def.axes) {
      const i = Object.hasOwn(value, axis) ? index.get(value[axis]) : undefined;
      if (i === undefined) throw new TypeError(`${shownValue(value[axis])} is not a category of attribute ${axis} of metric ${def.name}`);
      cell = cell * index.size + i;
    }
    return { input: cell, clipped: false };
  }
  if (def.kind === "strings") {
    if (typeof value !== "string" || !value.isWellFormed()) throw new TypeError(`metric ${def.name} takes a (well-formed) string, got ${shownValue(value)}`);
    const bytes = new TextEncoder().encode(value);
    if (bytes.length > def.max_length) {
      throw new TypeError(`${shownValue(value)} is ${bytes.length} bytes in UTF-8, longer than max_length = ${def.max_length}; nothing was recorded`);
    }
    return { input: bytes, clipped: false };
  }
  // The Python client's messages (tests/fixtures/client_shapes.json): a string shown quoted.
  if (def.index) {
    if (typeof value !== "string") throw new TypeError(`metric ${def.name} takes one of its categories (a string), got ${shownValue(value)}`);
    const i = def.index.get(value);
    if (i === undefined) {
      const cats = [...def.index.keys()];
      const expected = cats.slice(0, 20).join(", ") + (cats.length > 20 ? "..." : "");
      throw new TypeError(`${shownValue(value)} is not a category of metric ${def.name}; expected one of ${expected}`);
    }
    return { input: i, clipped: false };
  }
  const [lo, hi] = def.bounds;
  if (typeof value !== "number") {
    throw new TypeError(`metric ${def.name} takes a number in [${lo}, ${hi}], got ${typeof value} ${shownValue(value)}`);
  }
  if (!Number.isFinite(value)) throw new TypeError(`metric ${def.name} takes a finite number, got ${value}`);
  const input = Math.min(Math.max(value, lo), hi); // the distribution's leaf comes from it
  return { input, clipped: input !== value };
}

export { canonicalParameters };
