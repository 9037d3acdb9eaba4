// The conformance kit against this client: `ldpkit conformance plan`, this client's
// samplers, `ldpkit conformance check`. A deliberately broken OLH must fail it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { fingerprint } from "../src/canonical.js";
import { DefinitionError, encodeValue, prepare } from "../src/definitions.js";
import { seededRandom } from "../src/chacha.js";
import { CryptoWords, MECHANISMS, sampler } from "../src/sampling.js";
import { encodeSealedBatch, ID_SIZE } from "../src/wire.js";
import { BudgetExceeded, Reporter } from "../src/reporter.js";
import { MemoryStore } from "../src/store.js";
import { ldpkit } from "./python.js";

const dir = mkdtempSync(join(tmpdir(), "ldpkit-conformance-"));
const planPath = join(dir, "plan.json");

// Seeded words (a ChaCha20 keystream): at the kit's alpha of 1e-4 a correct client fails
// one check in 10,000, so each batch here is fixed and so is its verdict.
const seededWords = (seed) => new CryptoWords(1024, seededRandom(seed));

/** A uniform double in [0, 1) from two words. */
const uniform = (words) => (words.word() * 2097152 + (words.word() >>> 11)) / 2 ** 53;

function textbookOlh(def, words) {
  // ((a v + b) mod (2^61 - 1)) mod g with 61-bit keys: well-formed reports, wrong law.
  const P = (1n << 61n) - 1n;
  const g = def.derived.g;
  const e = Math.exp(def.epsilon);
  const p = e / (e + g - 1);
  return (x) => {
    const a = 1n + BigInt(Math.floor(uniform(words) * 2 ** 52)) % (P - 1n);
    const b = BigInt(Math.floor(uniform(words) * 2 ** 52));
    let y = Number(((a * BigInt(x) + b) % P) % BigInt(g));
    if (uniform(words) >= p) {
      const o = Math.floor(uniform(words) * (g - 1));
      y = o + (o >= y ? 1 : 0);
    }
    const out = new Uint8Array(20);
    const view = new DataView(out.buffer);
    view.setBigUint64(0, a, true);
    view.setBigUint64(8, b, true);
    view.setUint32(16, y, true);
    return out;
  };
}

function halfNoiseGaussian(def, words) {
  // The discrete Gaussian with half the served sigma (a misread calibration).
  const s = Math.sqrt(def.derived.t * def.derived.m) / 2;
  const t = Math.floor(s) + 1;
  const sample = sampler({ ...def, derived: { ...def.derived, t, m: Math.ceil((s * s) / t) } });
  return (x) => sample(x, words);
}

async function respond(plan, seed, broken = {}, reuse = null) {
  return encodeSealedBatch(globalThis.crypto.getRandomValues(new Uint8Array(ID_SIZE)), [...(await respondBlocks(plan, seed, broken, reuse)).values()]);
}

/** Each plan metric's block (a Map by name); with `reuse`, only the broken mechanisms' are made anew. */
async function respondBlocks(plan, seed, broken = {}, reuse = null) {
  const words = seededWords(seed);
  const blocks = new Map();
  for (const raw of plan.metrics) {
    if (reuse && !broken[raw.resolved_mechanism]) {
      blocks.set(raw.name, reuse.get(raw.name));
      continue;
    }
    const def = await prepare(raw); // checks the fingerprint and the served constants
    const sample = broken[def.resolved_mechanism]?.(def, words) ?? ((x) => def.sample(x, words));
    const reports = [];
    for (const input of plan.inputs) {
      if (input.metric !== def.name) continue;
      const { input: x } = encodeValue(def, input.value);
      for (let i = 0; i < input.count; i++) {
        reports.push(sample(x));
      }
    }
    blocks.set(def.name, { metric: def.name, fp: def.fingerprint, bucket: plan.bucket, reports });
  }
  return blocks;
}

// Broken clients the wide, seeded and structured cases of the plan catch (the JS copies of
// tests/shared/test_conformance.py's doubles): each well-formed, each wrong.

/** A strings client that hashes with seed 0 whatever the definition serves. */
function ignoredSeed(def, words) {
  const sample = sampler({ ...def, derived: { ...def.derived, seed: "0000000000000000" } });
  return (x) => sample(x, words);
}

const REVERSED = Uint8Array.from({ length: 256 }, (_, i) => parseInt(i.toString(2).padStart(8, "0").split("").reverse().join(""), 2));

/** Bitmaps written with bit j at 0x80 >> (j % 8) of its byte (the protocol: 1 << (j % 8)); only at d a multiple of 8, where no padding bit gives it away. */
function msbFirst(def, words) {
  return (x) => {
    const right = def.sample(x, words);
    return def.categories.length % 8 ? right : right.map((b) => REVERSED[b]);
  };
}

/** A view client that samples every `sue` view with `oue` (the same bitmap, another law). */
function oueForSue(def, words) {
  const q = BigInt(Math.ceil(2 ** 64 / (Math.exp(def.epsilon) + 1))).toString(16).padStart(16, "0");
  const views = def.derived.views.map((v) => (v.oracle === "sue" ? { ...v, oracle: "oue", p: "8000000000000000", q } : v));
  const sample = sampler({ ...def, derived: { ...def.derived, views } });
  return (x) => sample(x, words);
}

/** Which of the plan's `verify` definitions this client accepts (prepare checks them). */
async function verify(plan, trusting = false) {
  const accepted = [];
  for (const { id, definition } of plan.verify) {
    try {
      if (trusting) {
        // A client that checks the fingerprint and trusts every served constant.
        if ((await fingerprint(definition)) !== definition.fingerprint) continue;
      } else {
        await prepare(definition);
      }
      accepted.push(id);
    } catch (err) {
      if (!(err instanceof DefinitionError)) throw err;
    }
  }
  const path = join(dir, trusting ? "trusting.json" : "accepted.json");
  writeFileSync(path, JSON.stringify({ accepted }));
  return path;
}

/**
 * This client's answer to the plan's device script: a real Reporter (its store, ledger and
 * memo) on a fresh device, offline (no Date to anchor its time), its clock reading each
 * step's `at`; its batches kept instead of sent. `options` and `served` make the broken
 * devices of the tests below.
 */
async function device(plan, name, options = {}, served = plan.device.definition) {
  const steps = plan.device.steps;
  let now = steps[0].at;
  const batches = [];
  const fetch = async (url, init) => {
    if (init.method === "GET") return new Response(JSON.stringify({ metrics: [served] }), { status: 200 });
    const body = new Uint8Array(init.body);
    batches.push(Buffer.from(body).toString("hex"));
    // Every report accepted: the answer accounts for the batch (the reporter checks it).
    const n = r.state.sealed.seqs.length;
    return new Response(JSON.stringify({ accepted: n, duplicates: 0, held: 0, rejected: [] }), { status: 200 });
  };
  const r = new Reporter("http://conformance.invalid", { token: "t", store: new MemoryStore(), fetch, clock: () => now, ...options });
  const refused = [];
  for (const [i, step] of steps.entries()) {
    now = step.at;
    try {
      await r.report(served.name, step.value);
    } catch (err) {
      if (!(err instanceof BudgetExceeded)) throw err;
      refused.push(i);
    }
  }
  await r.flush();
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify({ refused, batches }));
  return path;
}

test("this client passes the conformance kit for every mechanism", async () => {
  const made = ldpkit(["conformance", "plan", "--out", planPath, "--reports", "3000"]);
  assert.equal(made.status, 0, made.stderr);
  const plan = JSON.parse(readFileSync(planPath, "utf8"));
  const batch = join(dir, "reports.msgpack");
  const good = await respondBlocks(plan, 1);
  writeFileSync(batch, await respond(plan, 1, {}, good));
  const accepted = await verify(plan);
  const answered = ["--accepted", accepted, "--device", await device(plan, "device")];
  const checked = ldpkit(["conformance", "check", planPath, batch, ...answered]);
  assert.equal(checked.status, 0, checked.stdout + checked.stderr);
  assert.match(checked.stdout, /PASS/);
  for (const m of MECHANISMS) {
    assert.match(checked.stdout, new RegExp(`^${m} .* pass$`, "m"));
  }

  // The JS copies of the Python doubles, one batch (the other mechanisms' blocks as above):
  // each fails its own mechanism, on exactly the metrics only the new cases hold.
  const wrong = join(dir, "doubles.msgpack");
  const doubles = { prefix_sketch: ignoredSeed, oue: msbFirst, sue: msbFirst, ss: msbFirst, joint: oueForSue, levels: oueForSue };
  writeFileSync(wrong, await respond(plan, 4, doubles, good));
  const caught = ldpkit(["conformance", "check", planPath, wrong, ...answered]);
  assert.equal(caught.status, 1, caught.stdout + caught.stderr);
  assert.match(caught.stdout, /^FAIL: joint, levels, oue, prefix_sketch, ss, sue$/m);
  const named = new Set([...caught.stdout.matchAll(/^ {4}(\S+) value=/gm)].map((m) => m[1]));
  assert.deepEqual([...named].sort(), ["joint-sue-16", "levels-sue-16", "oue-d16-1_0", "prefix-sketch-seeded", "ss-d16-1_0", "sue-d16-1_0"]);

  const bad = join(dir, "textbook.msgpack");
  writeFileSync(bad, await respond(plan, 2, { olh: textbookOlh }));
  const failed = ldpkit(["conformance", "check", planPath, bad, ...answered]);
  assert.equal(failed.status, 1, failed.stdout + failed.stderr);
  assert.match(failed.stdout, /FAIL: olh$/m);

  const quiet = join(dir, "half-noise.msgpack");
  writeFileSync(quiet, await respond(plan, 3, { gaussian: halfNoiseGaussian }));
  const loud = ldpkit(["conformance", "check", planPath, quiet, ...answered]);
  assert.equal(loud.status, 1, loud.stdout + loud.stderr);
  assert.match(loud.stdout, /FAIL: gaussian$/m);
});

test("a client trusting the served constants fails the kit, the lying constant named", async () => {
  const plan = JSON.parse(readFileSync(planPath, "utf8"));
  const batch = join(dir, "reports.msgpack");
  const trusted = ldpkit(["conformance", "check", planPath, batch, "--accepted", await verify(plan, true), "--device", join(dir, "device.json")]);
  assert.equal(trusted.status, 1, trusted.stdout + trusted.stderr);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: grr-0_5: derived\.keep /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: hybrid-0_5: derived\.pm /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: levels: derived\.views\[0\]\.keep /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: gaussian-0_5: derived\.t, derived\.m /m);
  for (const lie of ["levels: derived.views[0].until", "olh-0_5: derived.g", "joint-marginals: derived.views[1].labels[0]", "prefix-sketch: derived.weights[0]"]) {
    assert.ok(trusted.stdout.includes(`ACCEPTED A LYING DEFINITION: ${lie} `), lie);
  }
});

test("a device without its memo or its ledger fails the kit, named", async () => {
  const plan = JSON.parse(readFileSync(planPath, "utf8"));
  const batch = join(dir, "reports.msgpack");
  const accepted = join(dir, "accepted.json");
  // The same reporter with memoization off, and one served a budget of 50 (the fingerprint
  // covers no budget: the ledger admits 50 fresh reports a day instead of 2).
  const noMemo = await device(plan, "no-memo", { memoize: false });
  const noLedger = await device(plan, "no-ledger", {}, { ...plan.device.definition, budget: 50 });
  for (const [path, named] of [[noMemo, "memo"], [noLedger, "ledger"]]) {
    const got = ldpkit(["conformance", "check", planPath, batch, "--accepted", accepted, "--device", path]);
    assert.equal(got.status, 1, got.stdout + got.stderr);
    assert.match(got.stdout, new RegExp(`^FAIL: device ${named}$`, "m"));
    assert.match(got.stdout, new RegExp(`^DEVICE: ${named.toUpperCase()}: step \\d+`, "m"));
  }
});
