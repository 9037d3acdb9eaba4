// A device token carries one device's reports (issue 26): the cap is computed as the
// Python client computes it, a device's batches stay within it by construction against a
// real `ldpkit serve`, a batch refused over the cap goes again within it (nothing lost, no
// loop), held reports are delivered, the token's role is read, and a device token's
// source is rate limited.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

import { BudgetExceeded, CollectorRejected, CollectorUnavailable, DefinitionError, MemoryStore, Reporter, deviceCap, prepare } from "../src/index.js";
import { INGEST, RELAY, startCollector } from "./collector.js";
import { PYTHON } from "./python.js";

const DAY = 86400;
const COLORS = ["red", "green", "blue"];
const METRICS = `
[metrics.day]
categories = ["red", "green", "blue"]
epsilon = 1.0
mechanism = "grr"

[metrics.hourly]
categories = ["red", "green", "blue"]
epsilon = 0.5
budget = 2.0
mechanism = "grr"
bucket = "hour"

[metrics.weekly]
categories = ["red", "green", "blue"]
epsilon = 1.0
budget = 3.0
mechanism = "grr"
bucket = "week"

[metrics.minutes]
kind = "numeric"
bounds = [0, 60]
epsilon = 0.5
budget = 1.0
mechanism = "duchi"
budget_period = "hour"

[metrics.lowered]
categories = ["red", "green", "blue"]
epsilon = 1.0
budget = 4.0
mechanism = "grr"
`;
// (the collector's caps: day 1, hourly 4 fresh a day in an hour bucket, weekly 3 a day for
// 7 days, minutes 2 an hour for 24 hours, lowered 4)
const CAPS = { day: 1, hourly: 4, weekly: 21, minutes: 48, lowered: 4 };

let collector;

before(async () => {
  // Simulated weeks of one device: buckets up to 60 days old are taken, and the per-source
  // rate limit is off (one device sends its weeks' batches at once; see the strict
  // collector below for the limit).
  collector = await startCollector(METRICS, "report_id_retention_days = 90\ndevice_batches_per_minute = 0");
});

after(async () => {
  await collector?.stop();
});

/** A seeded uniform [0, 1) (mulberry32): the same device history on every run. */
function uniforms(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The blocks of a sealed (v2) batch body: [{metric, fp, bucket, n}] (the msgpack it uses). */
function blocksOf(body) {
  const bytes = new Uint8Array(body);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const sized = (size) => {
    const n = size === 1 ? view.getUint8(at) : size === 2 ? view.getUint16(at) : view.getUint32(at);
    at += size;
    return n;
  };
  const read = () => {
    const b = bytes[at++];
    if (b < 0x80) return b;
    if (b >= 0x80 && b <= 0x8f) return Object.fromEntries(Array.from({ length: b & 15 }, () => [read(), read()]));
    if (b >= 0x90 && b <= 0x9f) return Array.from({ length: b & 15 }, read);
    if (b >= 0xa0 && b <= 0xbf) return new TextDecoder().decode(bytes.subarray(at, (at += b & 31)));
    const sizes = { 0xcc: 1, 0xcd: 2, 0xce: 4, 0xd9: 1, 0xda: 2, 0xc4: 1, 0xc5: 2, 0xc6: 4, 0xdc: 2, 0xdd: 4 };
    if (b === 0xcf) return Number(view.getBigUint64((at += 8) - 8));
    const n = sized(sizes[b]);
    if (b >= 0xcc && b <= 0xce) return n;
    if (b === 0xd9 || b === 0xda) return new TextDecoder().decode(bytes.subarray(at, (at += n)));
    if (b >= 0xc4 && b <= 0xc6) return bytes.subarray(at, (at += n));
    return Array.from({ length: n }, read);
  };
  const batch = read();
  assert.equal(batch.v, 2);
  return batch.blocks.map(({ metric, fp, bucket, n }) => ({ metric, fp, bucket, n }));
}

/** A fetch that records each POST's blocks and answer status (and may answer instead). */
/**
 * The answer without its `Date`: these devices live on a simulated clock (weeks in the
 * past, a day set back), which a reporter would otherwise leave for the collector's time.
 */
function undated(response) {
  const headers = new Headers(response.headers);
  headers.delete("date");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

function recording(answer = () => null) {
  const posts = [];
  const fetcher = async (url, init) => {
    if (init.method !== "POST") return undated(await fetch(url, init));
    const post = { blocks: blocksOf(init.body), status: 0 };
    posts.push(post);
    const response = answer(post, posts.length) ?? undated(await fetch(url, init));
    post.status = response.status;
    return response;
  };
  return { posts, fetcher };
}

/** Reports of `metric` the collector counted or holds (its current version). */
async function countedOrHeld(metric) {
  let total = (await collector.estimates(metric)).n;
  let before = null;
  do {
    const page = await collector.admin("GET", `admin/held?limit=1000${before === null ? "" : `&before=${before}`}`);
    for (const h of page.held) if (h.metric === metric && h.released === null) total += h.n;
    before = page.before;
  } while (before !== null);
  return total;
}

const overCap = (version, cap) => new Response(JSON.stringify({ error: "over_device_cap", detail: "over the cap", metric: "lowered", version, bucket: 0, cap }), { status: 400 });

test("the cap is the Python client's (MetricDefinition.device_cap) on many definitions", () => {
  const u = uniforms(26);
  const periods = ["hour", "day", "week"];
  const cases = [];
  const epsilons = [0.1, 0.2, 0.3, 1 / 3, 0.7, 1, 1.1, 2.5, 7, 50, 1e-3, 0.05, ...Array.from({ length: 20 }, () => 0.001 * 5000 ** u())];
  // Budgets near multiples of epsilon (products and sums in floating point, nudged by
  // about the ledger's slack, where a rounding would show), and anywhere.
  const nudges = [0, 1e-12, 1e-10, 5e-10, 9e-10, 1e-9, 1.1e-9, 2e-9, 1e-8, 1e-6].flatMap((r) => [r, -r]);
  for (const e of epsilons) {
    let sum = 0;
    for (let k = 1; k <= 60 && k * e <= 50; k++) {
      sum += e;
      for (const b of [k * e, sum, ...nudges.map((r) => k * e * (1 + r)), e + u() * (50 - e)]) {
        if (b >= e && b <= 50) cases.push([e, b, periods[cases.length % 3], periods[Math.floor(cases.length / 3) % 3]]);
      }
    }
    cases.push([e, null, periods[cases.length % 3], "day"]); // no budget: one report a period
  }
  const script = `
import json, sys
from ldpkit.metrics import MetricDefinition
out = []
for e, b, bucket, period in json.load(sys.stdin):
    d = MetricDefinition.categorical("m", ["a", "b"], epsilon=e, budget=b, bucket=bucket, budget_period=period, mechanism="grr")
    served = d.to_dict()
    out.append([{k: served[k] for k in ("epsilon", "budget", "bucket", "budget_period")}, d.device_cap])
json.dump(out, sys.stdout)
`;
  const run = spawnSync(PYTHON, ["-c", script], { input: JSON.stringify(cases), encoding: "utf8", maxBuffer: 1 << 26 });
  assert.equal(run.status, 0, run.stderr);
  const answers = JSON.parse(run.stdout);
  assert.ok(answers.length === cases.length && cases.length > 3000, `${cases.length} cases`);
  const caps = new Set();
  for (const [served, cap] of answers) {
    assert.equal(deviceCap(served), cap, JSON.stringify(served));
    caps.add(cap);
  }
  // The nudges land on both sides of the slack: floor() takes several values per multiple.
  assert.ok(caps.size > 100, `${caps.size} distinct caps`);
});

for (const memoize of [true, false]) {
  test(`a device reporting for weeks never sends a batch over its cap and loses nothing (memoize ${memoize})`, async () => {
    const u = uniforms(memoize ? 1 : 2);
    const today = Math.floor(Date.now() / 1000 / DAY) * DAY;
    let now = today - 50 * DAY;
    const { posts, fetcher } = recording();
    const batchSize = 1 + Math.floor(u() * 30);
    const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), clock: () => now, fetch: fetcher, memoize, batchSize });
    const names = ["day", "hourly", "weekly", "minutes"];
    const stored = {};
    for (const metric of names) {
      assert.equal(deviceCap(await r.definition(metric)), CAPS[metric]);
      stored[metric] = await countedOrHeld(metric);
    }
    const queued = Object.fromEntries(names.map((m) => [m, 0]));
    let refused = 0;
    const result = { sent: 0, duplicates: 0, held: 0, refusals: [] };
    const flush = async () => {
      const sent = await r.flush();
      for (const key of ["sent", "duplicates", "held"]) result[key] += sent[key];
      result.refusals.push(...sent.refusals);
    };
    for (let step = 0; now < today - DAY; step++) {
      const metric = names[Math.floor(u() * names.length)];
      const value = metric === "minutes" ? Math.floor(u() * 3) * 20 : COLORS[Math.floor(u() * 3)];
      try {
        if ((await r.report(metric, value)).queued) queued[metric] += 1;
      } catch (err) {
        if (!(err instanceof BudgetExceeded)) throw err;
        refused += 1;
      }
      now += -900 * Math.log(1 - u()); // about 4 reports an hour
      if (step % 97 === 0) await flush();
    }
    await flush();
    assert.equal(r.tokenRole, "device");
    assert.equal(r.pending(), 0);
    const total = Object.values(queued).reduce((a, b) => a + b, 0);
    assert.deepEqual([result.sent, result.duplicates, result.refusals], [total, 0, []]);
    assert.ok(refused > 100 && posts.length > 50, `${refused} refused, ${posts.length} batches`);
    // Every batch was answered 200 (a batch over a cap would be refused whole), and within
    // the caps by the client's own count too.
    const perBucket = new Map();
    for (const { blocks, status } of posts) {
      assert.equal(status, 200);
      const inBatch = new Map();
      for (const { metric, bucket, n } of blocks) {
        const key = `${metric}|${bucket}`;
        inBatch.set(key, (inBatch.get(key) ?? 0) + n);
        perBucket.set(key, (perBucket.get(key) ?? 0) + n);
      }
      for (const [key, n] of inBatch) assert.ok(n <= CAPS[key.split("|")[0]], `${key}: ${n} in one batch`);
    }
    // The ledger keeps each bucket within its cap, and reaches it.
    for (const [key, n] of perBucket) assert.ok(n <= CAPS[key.split("|")[0]], `${key}: ${n}`);
    const most = Object.fromEntries(names.map((m) => [m, Math.max(...[...perBucket].filter(([key]) => key.startsWith(`${m}|`)).map(([, n]) => n))]));
    assert.ok(Object.entries(most).some(([m, n]) => n === CAPS[m]), JSON.stringify(most));
    // Nothing lost: the collector counted or held every report once. (Screening may hold
    // some: a memoized report queued again in each hour bucket of its day is one report
    // repeated, which a sender window of a day's hours, sent at once, can fail.)
    for (const metric of names) assert.equal((await countedOrHeld(metric)) - stored[metric], queued[metric], metric);
    await r.close();
  });
}

test("a definition whose budget is under one report's epsilon (a cap of 0) is refused, as in Python", async () => {
  const probe = new Reporter(collector.url, { token: INGEST, store: new MemoryStore() });
  await probe.definition("lowered");
  const served = probe.cachedDefinitions.find((d) => d.name === "lowered");
  await probe.close();
  assert.equal(deviceCap(await prepare(served)), 4);
  assert.equal(deviceCap(await prepare({ ...served, budget: 1.0 })), 1);
  await assert.rejects(prepare({ ...served, budget: 0.999 }), (err) => err instanceof DefinitionError && /budget 0.999 is smaller than the epsilon/.test(err.message));
});

test("a clock set back queues no memoized value twice into a bucket (issue 29)", async () => {
  // It used to: the memoized report of the later window went into the first day's bucket
  // again, over the device's cap (and the batches were cut within it). The memo window is
  // now the report's own time's, and the first day's budget is spent.
  const day = Math.floor(Date.now() / 1000 / DAY) * DAY - 3 * DAY;
  for (const [token, role, batches] of [
    [INGEST, "device", [{ [day]: 1, [day + DAY]: 1 }]],
    [RELAY, "relay", [{ [day]: 1, [day + DAY]: 1 }]],
  ]) {
    let now = day + 12 * 3600;
    const { posts, fetcher } = recording();
    const r = new Reporter(collector.url, { token, store: new MemoryStore(), clock: () => now, fetch: fetcher });
    await r.report("day", "red");
    now += DAY; // the next day: a fresh report
    await r.report("day", "red");
    now -= DAY - 3600; // back to the first day: its memo is pruned, the ledger's day is spent
    await assert.rejects(r.report("day", "red"), BudgetExceeded);
    assert.equal(r.tokenRole, role);
    const sent = await r.flush();
    assert.deepEqual([sent.sent, sent.remaining], [2, 0]);
    const seen = posts.map(({ blocks, status }) => {
      assert.equal(status, 200);
      return Object.fromEntries(blocks.map((b) => [b.bucket, b.n]));
    });
    assert.deepEqual(seen, batches);
    await r.close();
  }
});

test("a collector whose cap was lowered gets the same reports again within it", async () => {
  const { posts, fetcher } = recording();
  let later = 0;
  const clock = () => Date.now() / 1000 + later;
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: fetcher, memoize: false, clock });
  for (const color of [...COLORS, "red"]) await r.report("lowered", color); // 4: this device's cap
  const lowered = (budget) => collector.admin("PUT", "metrics/lowered", { kind: "categorical", categories: COLORS, epsilon: 1.0, mechanism: "grr", budget });
  const { definition } = await lowered(2.0);
  try {
    assert.equal(definition.fingerprint, (await r.definition("lowered")).fingerprint); // the same version, a cap of 2
    const before = await countedOrHeld("lowered");
    const sent = await r.flush();
    assert.deepEqual(posts.map((p) => [p.status, p.blocks.reduce((n, b) => n + b.n, 0)]), [[400, 4], [200, 2], [200, 2]]);
    assert.deepEqual([sent.sent, sent.remaining], [4, 0]);
    assert.equal(await countedOrHeld("lowered"), before + 4); // once each
    // The refusal said the definitions changed: fetched again (a minute on), the lower budget.
    later = 120;
    assert.equal((await r.definition("lowered")).budget, 2);
  } finally {
    await lowered(4.0);
    await r.close();
  }
});

test("an over_device_cap the client cannot honour is refused, nothing lost, no loop", async () => {
  const probe = new Reporter(collector.url, { token: INGEST, store: new MemoryStore() });
  const fp = (await probe.definition("lowered")).fingerprint;
  await probe.close();
  // Always over a cap of 1: the 3 reports go again one a batch, and that is refused too.
  const always = recording(() => overCap(fp, 1));
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: always.fetcher, memoize: false });
  for (const color of COLORS) await r.report("lowered", color);
  await assert.rejects(r.flush(), (err) => err instanceof CollectorRejected && err.error === "over_device_cap" && /within the stated cap already/.test(err.message));
  assert.deepEqual(always.posts.map((p) => p.blocks[0].n), [3, 1]);
  assert.equal(r.pending(), 3);
  // An answer that does not state the cap (or another version's) cannot be honoured either.
  for (const answer of [() => new Response(JSON.stringify({ error: "over_device_cap" }), { status: 400 }), () => overCap("0000000000000000", 1)]) {
    const fake = recording(answer);
    const s = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: fake.fetcher, memoize: false });
    for (const color of COLORS) await s.report("lowered", color);
    await assert.rejects(s.flush(), (err) => err instanceof CollectorRejected && err.status === 400);
    assert.deepEqual([fake.posts.length, s.pending()], [1, 3]);
    // Then the collector (the real one) takes them all, once.
    s.fetch = fetch;
    assert.deepEqual(await s.flush(), { sent: 3, duplicates: 0, held: 0, rejected: 0, remaining: 0, deferred: 0, refusals: [] });
  }
});

test("held reports are delivered and counted; an answer holding more than it accepted is not one", async () => {
  const holding = recording(() => new Response(JSON.stringify({ accepted: 2, duplicates: 0, held: 2, rejected: [] }), { status: 200 }));
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: holding.fetcher, memoize: false });
  await r.report("lowered", "red");
  await r.report("lowered", "blue");
  assert.deepEqual(await r.flush(), { sent: 2, duplicates: 0, held: 2, rejected: 0, remaining: 0, deferred: 0, refusals: [] });
  for (const held of [3, -1, 0.5, "1", null]) {
    const liar = recording(() => new Response(JSON.stringify({ accepted: 2, duplicates: 0, held, rejected: [] }), { status: 200 }));
    const s = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: liar.fetcher, memoize: false, retries: 1, backoffMs: 1 });
    await s.report("lowered", "red");
    await s.report("lowered", "blue");
    await assert.rejects(s.flush(), CollectorUnavailable);
    assert.equal(s.pending(), 2, `held ${held}`);
  }
});

test("a strict collector: a forged batch is held (delivered), then the source is rate limited (kept)", async () => {
  // One device batch from a source, then none for 1000 seconds.
  const strict = await startCollector(
    `
[metrics.flags]
categories = [${Array.from({ length: 16 }, (_, i) => `"f${i}"`).join(", ")}]
epsilon = 1.0
budget = 10.0
mechanism = "oue"
`,
    "device_batches_per_minute = 0.06\ndevice_burst = 1",
  );
  try {
    // Words of zeros set every bit of an OUE report: no honest device sends 10 of those.
    const forger = new Reporter(strict.url, { token: INGEST, store: new MemoryStore(), memoize: false, random: (bytes) => bytes.fill(0) });
    for (let i = 0; i < 10; i++) await forger.report("flags", "f3");
    assert.deepEqual(await forger.flush(), { sent: 10, duplicates: 0, held: 10, rejected: 0, remaining: 0, deferred: 0, refusals: [] });
    assert.equal((await strict.estimates("flags")).n, 0); // held: not counted
    const r = new Reporter(strict.url, { token: INGEST, store: new MemoryStore(), retries: 1, backoffMs: 1, maxRetryAfterMs: 10 });
    await r.report("flags", "f1");
    await assert.rejects(r.flush(), (err) => err instanceof CollectorUnavailable && err.status === 429 && err.error === "source_rate_limited" && err.retryAfter >= 900);
    assert.equal(r.pending(), 1);
  } finally {
    await strict.stop();
  }
});
