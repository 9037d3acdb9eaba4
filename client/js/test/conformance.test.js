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

async function respond(plan, seed, broken = {}) {
  const words = seededWords(seed);
  const blocks = [];
  for (const raw of plan.metrics) {
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
    blocks.push({ metric: def.name, fp: def.fingerprint, bucket: plan.bucket, reports });
  }
  return encodeSealedBatch(globalThis.crypto.getRandomValues(new Uint8Array(ID_SIZE)), blocks);
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

test("this client passes the conformance kit for every mechanism", async () => {
  const made = ldpkit(["conformance", "plan", "--out", planPath, "--reports", "3000"]);
  assert.equal(made.status, 0, made.stderr);
  const plan = JSON.parse(readFileSync(planPath, "utf8"));
  const batch = join(dir, "reports.msgpack");
  writeFileSync(batch, await respond(plan, 1));
  const accepted = await verify(plan);
  const checked = ldpkit(["conformance", "check", planPath, batch, "--accepted", accepted]);
  assert.equal(checked.status, 0, checked.stdout + checked.stderr);
  assert.match(checked.stdout, /PASS/);
  for (const m of MECHANISMS) {
    assert.match(checked.stdout, new RegExp(`^${m} .* pass$`, "m"));
  }

  const bad = join(dir, "textbook.msgpack");
  writeFileSync(bad, await respond(plan, 2, { olh: textbookOlh }));
  const failed = ldpkit(["conformance", "check", planPath, bad, "--accepted", accepted]);
  assert.equal(failed.status, 1, failed.stdout + failed.stderr);
  assert.match(failed.stdout, /FAIL: olh$/m);

  const quiet = join(dir, "half-noise.msgpack");
  writeFileSync(quiet, await respond(plan, 3, { gaussian: halfNoiseGaussian }));
  const loud = ldpkit(["conformance", "check", planPath, quiet, "--accepted", accepted]);
  assert.equal(loud.status, 1, loud.stdout + loud.stderr);
  assert.match(loud.stdout, /FAIL: gaussian$/m);
});

test("a client trusting the served constants fails the kit, the lying constant named", async () => {
  const plan = JSON.parse(readFileSync(planPath, "utf8"));
  const batch = join(dir, "reports.msgpack");
  const trusted = ldpkit(["conformance", "check", planPath, batch, "--accepted", await verify(plan, true)]);
  assert.equal(trusted.status, 1, trusted.stdout + trusted.stderr);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: grr-0_5: derived\.keep /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: hybrid-0_5: derived\.pm /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: levels: derived\.views\[0\]\.keep /m);
  assert.match(trusted.stdout, /^ACCEPTED A LYING DEFINITION: gaussian-0_5: derived\.t, derived\.m /m);
});
