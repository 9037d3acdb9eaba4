// The test vectors of docs/protocol.md, byte for byte: sampling (words in, reports out),
// fingerprints (canonical JSON and hash) and batch framing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { canonicalParameters, fingerprint, pyFloat, pyString } from "../src/canonical.js";
import { DefinitionError, encodeValue, prepare } from "../src/definitions.js";
import { ListWords, MECHANISMS, sampler } from "../src/sampling.js";
import { encodeSealedBatch, fromHex, toHex } from "../src/wire.js";

const DOC = readFileSync(fileURLToPath(new URL("../../../docs/protocol.md", import.meta.url)), "utf8");
const SECTION = DOC.slice(DOC.indexOf("## Test vectors"));
const FENCE = /^```([^\n`]+)\n([\s\S]*?)^```\s*$/gm;
const vectors = new Map();
for (const [, info, body] of SECTION.matchAll(FENCE)) vectors.set(info.trim(), body.trim());

const AUTO = { distribution: "hh", strings: "prefix_sketch" };

function served(name, definition) {
  const out = {
    name,
    kind: definition.kind,
    resolved_mechanism: !definition.mechanism || definition.mechanism === "auto" ? AUTO[definition.kind] : definition.mechanism,
    epsilon: definition.epsilon,
    bucket: definition.bucket ?? "day",
  };
  for (const key of ["categories", "dimensions", "max_length", "resolution", "mechanism_params", "delta", "derived"]) if (key in definition) out[key] = definition[key];
  if (definition.bounds) out.bounds = definition.bounds.map(Number);
  return out;
}

const samples = [...vectors].filter(([k]) => k.startsWith("json sample "));

test("the document has a sampling vector for every mechanism", () => {
  const mechanisms = new Set(samples.map(([, body]) => served("m", JSON.parse(body).definition).resolved_mechanism));
  assert.deepEqual([...mechanisms].sort(), [...MECHANISMS].sort());
});

for (const [key, body] of samples) {
  test(`sampling vector ${key.slice(12)}`, () => {
    const v = JSON.parse(body);
    const def = { ...served("m", v.definition), derived: v.derived };
    const sample = sampler(def);
    const prepared = { ...def, index: def.categories ? new Map(def.categories.map((c, i) => [c, i])) : undefined, axes: def.dimensions?.map(([axis, cats]) => ({ axis, index: new Map(cats.map((c, i) => [c, i])) })) };
    const words = new ListWords(v.words.split(/\s+/).map((w) => parseInt(w, 16)));
    const parts = v.values.map((value) => toHex(sample(encodeValue(prepared, value).input, words)));
    assert.equal(parts.join(""), v.reports);
    assert.equal(words.used, words.words.length, "every word used, no more");
  });
}

for (const [key, body] of vectors) {
  if (!key.startsWith("json definition ")) continue;
  const name = key.slice(16);
  test(`fingerprint vector ${name}`, async () => {
    const def = served(name, JSON.parse(body));
    assert.equal(canonicalParameters(def), vectors.get(`text canonical ${name}`));
    const match = SECTION.match(new RegExp("`([0-9a-f]{16})` \\(fingerprint " + name + "\\)"));
    assert.ok(match, `no fingerprint for ${name}`);
    assert.equal(await fingerprint(def), match[1]);
  });
}

for (const [key, body] of vectors) {
  const m = key.match(/^hex v2 ([a-z0-9-]+)$/);
  if (!m) continue;
  test(`sealed batch vector ${m[1]}`, () => {
    const want = JSON.parse(vectors.get(`json v2 ${m[1]}`));
    const blocks = want.blocks.map((b) => {
      const reports = fromHex(b.reports);
      const size = reports.length / b.n;
      return {
        metric: b.metric,
        fp: b.fp,
        bucket: b.bucket,
        reports: Array.from({ length: b.n }, (_, i) => reports.slice(i * size, (i + 1) * size)),
      };
    });
    assert.equal(toHex(encodeSealedBatch(fromHex(want.batch), blocks)), body.replace(/\s+/g, ""));
  });
}

test("floats and strings as Python's json writes them", () => {
  const cases = [[1, "1.0"], [0.5, "0.5"], [1000, "1000.0"], [1e-4, "0.0001"], [1e-5, "1e-05"], [1.5e-7, "1.5e-07"], [1e16, "1e+16"], [-2.5e100, "-2.5e+100"], [123456789012345.6, "123456789012345.6"], [9999999999999998, "9999999999999998.0"], [0.1, "0.1"], [-0, "-0.0"], [5e-324, "5e-324"], [1.7976931348623157e308, "1.7976931348623157e+308"]];
  for (const [x, want] of cases) assert.equal(pyFloat(x), want, String(x));
  assert.equal(pyString('é"\\\x7f\u2028🙂\t/'), '"\\u00e9\\"\\\\\\u007f\\u2028\\ud83d\\ude42\\t/"');
});

test("the document has a fingerprint vector for every kind", () => {
  const kinds = new Set([...vectors].filter(([k]) => k.startsWith("json definition ")).map(([, body]) => JSON.parse(body).kind));
  assert.deepEqual([...kinds].sort(), ["categorical", "distribution", "hierarchy", "numeric", "strings", "table"]);
});

const refused = [...vectors].filter(([k]) => k.startsWith("json refuse "));

test("the document has definitions to refuse", () => assert.ok(refused.length >= 5));

for (const [key, body] of refused) {
  const name = key.slice(12);
  test(`this client refuses the lying definition ${name}`, async () => {
    const served = JSON.parse(body);
    assert.equal(await fingerprint(served), served.fingerprint, "the fingerprint is right");
    await assert.rejects(prepare(served), DefinitionError);
  });
}
