// Definitions are checked before use: the fingerprint of every kind (its canonical JSON
// rebuilt with Python's float repr), and the served constants. Tampered definitions of
// each kind are refused; awkward floats round-trip to Python's fingerprint.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

import { fingerprint, pyFloat } from "../src/canonical.js";
import { DefinitionError, prepare } from "../src/definitions.js";
import { PYTHON } from "./python.js";

function python(code) {
  const out = spawnSync(PYTHON, ["-c", code], { encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  return JSON.parse(out.stdout);
}

// One definition of every kind and mechanism family, with floats JSON.parse cannot tell
// from integers (1.0, 1e16, 1e-05, 0.1 + 0.2, -0.0) wherever the kind has floats.
const SERVED = python(`
import json
from ldpkit.metrics import MetricDefinition
specs = {
    "numeric": {"kind": "numeric", "bounds": [-1e16, 1e-05], "epsilon": 0.1 + 0.2, "mechanism": "laplace"},
    "gaussian": {"kind": "numeric", "bounds": [-0.0, 1.0], "epsilon": 1.0, "mechanism": "gaussian", "delta": 1e-05},
    "categorical": {"kind": "categorical", "categories": ["a", "🙂", "é"], "epsilon": 1e-05, "mechanism": "grr"},
    "distribution": {"kind": "distribution", "bounds": [-0.0, 1e16], "resolution": 64, "epsilon": 0.1 + 0.2},
    "hierarchy": {"kind": "hierarchy", "categories": ["MX/Jalisco", "MX/Sonora", "US/Texas", "Perú"], "epsilon": 1.0, "mechanism": "levels"},
    "table": {"kind": "table", "dimensions": [["type", ["Van", "Compact", "Sporty"]], ["origin", ["USA", "non-USA"]]], "epsilon": 0.1 + 0.2, "mechanism": "joint_marginals"},
    "rollup": {"kind": "hierarchy", "categories": ["a/x", "a/y", "b"], "epsilon": 2.0, "mechanism": "rollup", "oracle": "oue"},
    "joint": {"kind": "table", "dimensions": [["ä", ["1", "2"]], ["b", ["3", "4"]]], "epsilon": 1.5, "mechanism": "joint"},
    "strings": {"kind": "strings", "max_length": 6, "k": 4, "epsilon": 4.0},
    "exponential": {"kind": "categorical", "categories": ["1", "2", "3", "4", "5"], "epsilon": 0.1 + 0.2, "mechanism": "exponential", "ordered": True, "score": "band", "band": 2},
    "scores": {"kind": "categorical", "categories": ["a", "b"], "epsilon": 1.0, "mechanism": "exponential", "scores": [[1e16, -0.0, 1e-05], [0.1 + 0.2, 1.0, 2.5]]},
}
print(json.dumps({k: MetricDefinition.from_dict(k, v).to_dict() for k, v in specs.items()}))
`);

test("pyFloat writes every double as Python's repr", () => {
  const cases = python(`
import json, random, struct
xs = [1.0, 1e16, 1e-05, 0.1 + 0.2, -0.0, 0.0, 1e-4, 0.00012, 9999999999999998.0, 1e15 + 0.5,
      5e-324, 1.7976931348623157e308, 123456789012345680.0, 2.5e-7, -1e100, 0.5, 100.0, 1e22]
rnd = random.Random(18)
xs += [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(2000)]
xs += [rnd.uniform(-1e6, 1e6) for _ in range(500)] + [10.0 ** rnd.randint(-30, 30) for _ in range(200)]
print(json.dumps([[struct.pack("<d", x).hex(), repr(x)] for x in xs if x == x and abs(x) != float("inf")]))
`);
  for (const [hex, repr] of cases) {
    const x = new DataView(Uint8Array.from(hex.match(/../g), (b) => parseInt(b, 16)).buffer).getFloat64(0, true);
    assert.equal(pyFloat(x), repr, hex);
  }
});

test("the fingerprint of every kind is checked, awkward floats included", async () => {
  for (const [name, raw] of Object.entries(SERVED)) {
    const def = await prepare(raw);
    assert.equal(def.fingerprint, raw.fingerprint, name);
  }
});

const clone = (x) => structuredClone(x); // keeps -0 (JSON would not)

// A change to a fingerprinted parameter of each kind, its fingerprint left as served.
const TAMPER = {
  numeric: (d) => (d.bounds[1] = 2e-05),
  gaussian: (d) => (d.delta = 1e-4),
  categorical: (d) => (d.categories = ["a", "🙂", "e"]),
  distribution: (d) => (d.mechanism_params.branching = 2),
  hierarchy: (d) => (d.mechanism_params.views[0].weight = 0.25),
  table: (d) => d.dimensions.reverse(),
  rollup: (d) => (d.categories = ["a/y", "a/x", "b"]),
  joint: (d) => (d.mechanism_params.epsilon = 1.25),
  strings: (d) => (d.mechanism_params.estimation_share = 0.5),
  exponential: (d) => (d.band = 1),
  scores: (d) => (d.scores[0][1] = 0.0),
};

test("a tampered definition of each kind is refused", async () => {
  assert.deepEqual(Object.keys(TAMPER).sort(), Object.keys(SERVED).sort());
  for (const [name, change] of Object.entries(TAMPER)) {
    const raw = clone(SERVED[name]);
    change(raw);
    await assert.rejects(prepare(raw), (err) => err instanceof DefinitionError && /fingerprint/.test(err.message), name);
  }
  // A number the schema does not know cannot be written canonically: refused too.
  const extra = clone(SERVED.distribution);
  extra.mechanism_params.surprise = 1;
  await assert.rejects(prepare(extra), /not in the schema/);
  const missing = clone(SERVED.strings);
  delete missing.mechanism_params;
  await assert.rejects(prepare(missing), /no mechanism_params/);
});

test("served constants must be those the fingerprint names", async () => {
  // The fingerprint is intact; the constants the sampler would use are not.
  const sketch = clone(SERVED.strings);
  sketch.derived.g += 1;
  await assert.rejects(prepare(sketch), /g differs/);
  const views = clone(SERVED.hierarchy);
  views.derived.views[0].size += 1;
  await assert.rejects(prepare(views), /views differs/);
  const seed = clone(SERVED.strings);
  seed.derived.seed = "0000000000000001";
  await assert.rejects(prepare(seed), /fingerprint/);
  // A Gaussian whose served sigma2 = t m is a quarter of the calibrated one: more than delta.
  const quiet = clone(SERVED.gaussian);
  const s = Math.sqrt(quiet.derived.t * quiet.derived.m) / 2;
  quiet.derived.t = Math.floor(s) + 1;
  quiet.derived.m = Math.ceil((s * s) / quiet.derived.t);
  await assert.rejects(prepare(quiet), /more than delta/);
});

test("the exponential mechanism's thresholds are recomputed: a nudged one is refused", async () => {
  for (const key of ["exponential", "scores"]) {
    const def = await prepare(clone(SERVED[key]));
    assert.equal(def.resolved_mechanism, "exponential");
    const nudged = clone(SERVED[key]);
    const row = nudged.derived.cumulative[1];
    // 2^-24 up (a relative 1e-7): still increasing, a channel off the exact calibration.
    row[0] = (BigInt(`0x${row[0]}`) + (1n << 40n)).toString(16).padStart(16, "0");
    await assert.rejects(prepare(nudged), /cumulative\[1\]\[0\]/);
    const score = clone(SERVED[key]);
    score.scores = null;
    score.score = "distance";
    await assert.rejects(prepare(score), /fingerprint/);
  }
});

test("a view served with an oracle the collector refuses for views is refused, fingerprint and all", async () => {
  // A consistent lie: mechanism_params and derived both say olh, the fingerprint recomputed.
  const def = structuredClone(SERVED.joint);
  def.mechanism_params.views[0].oracle = "olh";
  def.derived.views[0] = { ...def.derived.views[0], oracle: "olh", g: 4, keep: def.derived.views[0].keep };
  def.fingerprint = await fingerprint(def);
  await assert.rejects(prepare(def), /olh is not a view oracle/);
});

test("the views' until, labels and payload and the sketch's weights are recomputed, lies refused (issue 29)", async () => {
  // Each honest definition is accepted; each with one constant changed (the fingerprint
  // intact: it covers no derived constant) is refused, naming it.
  for (const name of ["hierarchy", "table", "rollup", "joint", "strings", "numeric", "gaussian", "distribution"]) await prepare(clone(SERVED[name]));
  const lies = [
    ["hierarchy", (d) => (d.derived.views[0].until = "ffffffffffffffff"), /views\[0\]\.until/], // always the first view
    ["hierarchy", (d) => (d.derived.views.at(-1).until = "8000000000000000"), /last view's until/],
    ["hierarchy", (d) => (d.derived.views[0].labels[0] = 1), /labels of view "depth 1"/], // a leaf in another group
    ["table", (d) => (d.derived.views[1].labels = d.derived.views[2].labels), /labels of view "type"/],
    ["table", (d) => (d.derived.payload += 1), /payload/],
    ["rollup", (d) => (d.derived.views[0].labels = [0, 1, 2].reverse()), /labels of view/],
    ["strings", (d) => (d.derived.weights[0] += 1), /sketch weights/],
    ["strings", (d) => (d.derived.weights[3] = 2), /sketch weights/],
    ["numeric", (d) => (d.derived.cap -= 1), /cap/],
    ["gaussian", (d) => (d.derived.cap = 1), /cap/],
    ["distribution", (d) => (d.derived.depths[0].leaves_per_node += 1), /leaves_per_node/],
  ];
  for (const [name, lie, named] of lies) {
    const raw = clone(SERVED[name]);
    lie(raw);
    await assert.rejects(prepare(raw), (err) => err instanceof DefinitionError && named.test(err.message), `${name}: ${named}`);
  }
});
