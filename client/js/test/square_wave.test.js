// The square wave (distribution metrics, mechanism "square_wave"): the cases of
// tests/fixtures/square_wave_cases.json, written by ldpkit's core (portable_report,
// served_constants; tests/shared/test_square_wave_clients.py), byte for byte.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { fingerprint } from "../src/canonical.js";
import { DefinitionError, encodeValue, prepare, squareWaveBand } from "../src/definitions.js";
import { ListWords, sampler } from "../src/sampling.js";
import { toHex } from "../src/wire.js";

const CASES = JSON.parse(readFileSync(fileURLToPath(new URL("../../../tests/fixtures/square_wave_cases.json", import.meta.url)), "utf8"));

for (const c of CASES.sampling) {
  test(`square wave sampling case ${c.name}: the core's buckets from the same words`, async () => {
    const def = await prepare(c.served); // verified as served, then sampled
    const words = new ListWords(c.words.split(/\s+/).map((w) => parseInt(w, 16)));
    const parts = c.values.map((value) => toHex(def.sample(encodeValue(def, value).input, words)));
    assert.equal(parts.join(""), c.reports);
    assert.equal(words.used, words.words.length, "every word used, no more");
  });
}

test("the square wave's band and near at every epsilon of the sweep", () => {
  for (const v of CASES.verification) {
    const b = squareWaveBand(v.epsilon);
    assert.ok(Math.abs(b - v.band) <= 1e-9 * v.band, `band at ${v.epsilon}: ${b} vs ${v.band}`);
    // The port is Python's formula, operation by operation: the same doubles here, and
    // the same threshold ceil(2 b p 2^64) (verification allows 1e-9, as for every threshold).
    assert.equal(b, v.band, `band at ${v.epsilon}`);
    const e = Math.exp(v.epsilon);
    const q = 1 / (2 * b * e + 1);
    const t = BigInt(Math.ceil(2 * b * (q * e) * 18446744073709551616));
    const near = (t > 0xffffffffffffffffn ? 0xffffffffffffffffn : t).toString(16).padStart(16, "0");
    assert.equal(near, v.near, `near at ${v.epsilon}`);
  }
});

/** A served case with one derived constant changed and the fingerprint recomputed. */
async function lying(c, change) {
  const raw = structuredClone(c.served);
  change(raw);
  raw.fingerprint = await fingerprint(raw);
  return raw;
}

const LIES = {
  "derived.band": (d) => (d.derived.band *= 1 + 1e-6),
  "derived.near": (d) => (d.derived.near = "ffffffffffffff00"),
  "derived.outputs": (d) => (d.derived.outputs += 1),
};

for (const c of CASES.sampling) {
  test(`square wave case ${c.name}: the honest definition is accepted, each lie refused by name`, async () => {
    await prepare(c.served);
    for (const [constant, change] of Object.entries(LIES)) {
      await assert.rejects(prepare(await lying(c, change)), (err) => err instanceof DefinitionError && err.message.includes(constant), constant);
    }
  });
}

test("a near nudged by 1e-6 either way is refused (up: above epsilon; down: not the formula), the band too", async () => {
  const c = CASES.sampling[0];
  const nudge = (hex, sign) => (BigInt(`0x${hex}`) + sign * (BigInt(`0x${hex}`) >> 20n)).toString(16).padStart(16, "0");
  for (const sign of [1n, -1n]) {
    await assert.rejects(prepare(await lying(c, (d) => (d.derived.near = nudge(d.derived.near, sign)))), /derived\.near/);
  }
  await assert.rejects(prepare(await lying(c, (d) => (d.derived.band = squareWaveBand(2 * d.epsilon)))), /derived\.band/);
  await assert.rejects(prepare(await lying(c, (d) => (d.mechanism_params.resolution = 5000))), /mechanism_params\.resolution/);
  // The fingerprint's schema has no output_buckets: a definition carrying one is refused.
  const extra = structuredClone(c.served);
  extra.mechanism_params.output_buckets = extra.derived.outputs;
  await assert.rejects(prepare(extra), /output_buckets/);
});
