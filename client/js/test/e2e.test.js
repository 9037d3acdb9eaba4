// Node devices report through a real `ldpkit serve`; the collector's estimates cover the
// truth. Then the reporter's durability, budget and memoization, and its retries.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { BudgetExceeded, MemoryStore, Reporter, UnknownMetric, seededRandom } from "../src/index.js";
import { INGEST, RELAY, startCollector } from "./collector.js";

const THEMES = ["light", "dark", "système"];
const TRUTH = [0.25, 0.55, 0.2];
const DEVICES = 1500;
// The simulated devices draw from seeded ChaCha20 keystreams (the reporter's `random`
// option, un-memoized), so every run sends the same reports and the 99.9% intervals below
// give the same verdict each time (unseeded, a correct run would fail about once in 125).
const LEVEL = "level=0.999";

let collector;

before(async () => {
  collector = await startCollector(`
[metrics.theme]
categories = ["light", "dark", "système"]
epsilon = 2.0

[metrics.page]
categories = [${Array.from({ length: 40 }, (_, i) => `"p${i}"`).join(", ")}]
epsilon = 2.0
mechanism = "olh"

[metrics.minutes]
kind = "numeric"
bounds = [0, 100]
epsilon = 2.0
mechanism = "piecewise"

[metrics.spend]
kind = "numeric"
bounds = [0, 100]
epsilon = 2.0
mechanism = "gaussian"
delta = 1e-3

[metrics.load]
kind = "distribution"
bounds = [0, 100]
resolution = 64
epsilon = 2.0

[metrics.search]
kind = "strings"
max_length = 8
epsilon = 4.0

[metrics.mood]
categories = ["calm", "busy", "tired"]
epsilon = 1.0
`);
});

after(async () => {
  await collector?.stop();
});

test("devices report through a real collector and the estimates cover the truth", async () => {
  // Many simulated devices from one address: a relay token (a device token's batches are
  // limited per source address, as a real device's would be).
  const seed = new Reporter(collector.url, { token: RELAY, store: new MemoryStore() });
  await seed.definition("theme");
  const definitions = { list: seed.cachedDefinitions, etag: null };
  let sum = 0;
  let pages = 0;
  for (let i = 0; i < DEVICES; i++) {
    const store = new MemoryStore({ definitions });
    const device = new Reporter(collector.url, { token: RELAY, store, memoize: false, random: seededRandom(i) });
    const theme = THEMES[i < TRUTH[0] * DEVICES ? 0 : i < (TRUTH[0] + TRUTH[1]) * DEVICES ? 1 : 2];
    await device.report("theme", theme);
    const page = i % 4 === 0 ? "p7" : `p${i % 40}`;
    if (page === "p7") pages++;
    await device.report("page", page);
    const minutes = (i * 37) % 101;
    sum += Math.min(minutes, 100);
    await device.report("minutes", minutes);
    const spent = await device.report("spend", minutes);
    assert.equal(spent.delta, 1e-3);
    assert.equal(device.budget().metrics.spend.deltaSpent, 1e-3);
    await device.report("load", minutes);
    await device.report("search", i % 3 === 0 ? "météo" : `q${i % 50}`);
    const sent = await device.flush();
    assert.equal(sent.sent, 6);
    assert.equal(device.pending(), 0);
    await device.close();
  }
  const theme = await collector.estimates("theme", LEVEL);
  assert.equal(theme.n, DEVICES);
  theme.items.forEach((item, i) => {
    assert.ok(item.low <= TRUTH[i] && TRUTH[i] <= item.high, `${item.category}: ${item.low}..${item.high} misses ${TRUTH[i]}`);
  });
  const page = await collector.estimates("page", LEVEL);
  const p7 = page.items.find((x) => x.category === "p7");
  const truth = pages / DEVICES;
  assert.ok(p7.low <= truth && truth <= p7.high, `p7: ${p7.low}..${p7.high} misses ${truth}`);
  const minutes = await collector.estimates("minutes", LEVEL);
  const mean = sum / DEVICES;
  assert.ok(minutes.low <= mean && mean <= minutes.high, `minutes: ${minutes.low}..${minutes.high} misses ${mean}`);
  const spend = await collector.estimates("spend", LEVEL);
  assert.equal(spend.n, DEVICES);
  assert.ok(spend.low <= mean && mean <= spend.high, `spend: ${spend.low}..${spend.high} misses ${mean}`);
  // Distributions and strings are maintained off the request path: wait for the estimate
  // of every report sent (an answer at once may be of fewer, and says so in as_of).
  const load = await collector.estimates("load", `${LEVEL}&bins=4&wait=60`);
  assert.equal(load.n, DEVICES);
  assert.ok(load.mean_low <= mean && mean <= load.mean_high, `load: ${load.mean_low}..${load.mean_high} misses ${mean}`);
  const search = await collector.estimates("search", `${LEVEL}&candidates=m%C3%A9t%C3%A9o&wait=60`);
  const meteo = search.candidates[0];
  const share = Math.ceil(DEVICES / 3) / DEVICES;
  assert.ok(meteo.low <= share && share <= meteo.high, `météo: ${meteo.low}..${meteo.high} misses ${share}`);
});

test("the outbox survives a restart, the budget holds, a value is memoized", async () => {
  const stateDir = mkdtempSync(join(tmpdir(), "ldpkit-device-"));
  const down = new Reporter("http://127.0.0.1:9", { token: INGEST, stateDir, retries: 1, backoffMs: 1 });
  await assert.rejects(down.report("theme", "dark"), /cannot reach/);
  await down.close();

  let now = Math.floor(Date.now() / 1000);
  let elapsed = 0;
  const clock = () => now;
  const monotonic = () => elapsed; // the time since the collector's answer
  const r = new Reporter(collector.url, { token: INGEST, stateDir, clock, monotonic });
  const first = await r.report("theme", "dark");
  assert.equal(first.queued, true);
  assert.equal(first.epsilon, 2);
  assert.equal(r.budget().metrics.theme.left, 0);
  // The same value again in the same budget window: the same report, no new budget.
  const again = await r.report("theme", "dark");
  assert.equal(again.memoized, true);
  assert.equal(again.queued, false);
  await assert.rejects(r.report("theme", "light"), BudgetExceeded);
  await assert.rejects(r.report("nope", "x"), UnknownMetric);
  await assert.rejects(r.report("theme", "purple"), /not a category/);
  await r.close({ flush: false });

  // A new process on the same state: the queued report is still there, and so is the ledger.
  const later = new Reporter(collector.url, { token: INGEST, stateDir, clock, monotonic });
  await later.ready();
  assert.equal(later.pending(), 1);
  await assert.rejects(later.report("theme", "light"), BudgetExceeded);
  const sent = await later.flush();
  assert.equal(sent.sent, 1);
  assert.equal(later.pending(), 0);
  now += 86400; // the next day (by the device's clock and since the answer): budget renewed
  elapsed += 86400;
  assert.equal((await later.report("theme", "light")).queued, true);
  await later.close();
});

test("a clock 400 days ahead and back puts no second report into a real day", async () => {
  // Device time is the collector's once it has answered (its Date header); offline, the
  // device's clock places reports, and a report 400 days ahead is refused when it
  // arrives. No real day's bucket gets a second report of the device, fresh or memoized.
  for (const memoize of [false, true]) {
    const stateDir = mkdtempSync(join(tmpdir(), "ldpkit-clock-"));
    let error = 0;
    const clock = () => Date.now() / 1000 + error;
    const before = (await collector.estimates("mood")).n;
    const device = (fetchImpl) => new Reporter(collector.url, { token: INGEST, stateDir, clock, memoize, ...(fetchImpl ? { fetch: fetchImpl } : {}) });
    const offline = async () => {
      throw new TypeError("fetch failed (offline)");
    };
    const same = async (r) => {
      // Today's budget is spent: a fresh value is refused, a memoized one not queued again.
      if (!memoize) return assert.rejects(r.report("mood", "calm"), BudgetExceeded);
      const receipt = await r.report("mood", "calm");
      assert.equal(receipt.queued, false);
    };
    const first = device();
    await first.report("mood", "calm");
    assert.equal((await first.flush()).sent, 1);
    await first.close();
    error = 400 * 86400; // the clock runs ahead
    const anchored = device();
    await anchored.ready(); // the collector answered: its time, not the device's
    await same(anchored);
    await anchored.close();
    const away = device(offline); // offline: the cached definitions, the device's clock
    await away.ready();
    assert.equal((await away.report("mood", "calm")).queued, true); // bucket 400 days ahead
    await away.close({ flush: false });
    const online = device();
    await online.ready();
    const sent = await online.flush();
    assert.deepEqual([sent.sent, sent.rejected], [0, 1]); // refused: a bucket more than a day in the future
    error = 0; // the clock comes back
    await same(online);
    await online.close();
    const back = device();
    await back.ready();
    await same(back);
    await back.close();
    assert.equal((await collector.estimates("mood")).n - before, 1);
  }
});

test("retries honour Retry-After and never drop what was not acknowledged", async () => {
  const calls = [];
  const busy = ["source_rate_limited", "too_many_requests"]; // a device token's source, then the collector
  const flaky = async (url, init) => {
    calls.push(init.method);
    if (init.method === "POST" && busy.length) {
      return new Response(JSON.stringify({ error: busy.shift(), detail: "d" }), { status: 429, headers: { "Retry-After": "1" } });
    }
    return fetch(url, init);
  };
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: flaky, backoffMs: 1 });
  await r.report("minutes", 42);
  const started = Date.now();
  const sent = await r.flush();
  assert.ok(Date.now() - started >= 1900, "waited Retry-After twice");
  assert.equal(sent.sent, 1);
  assert.deepEqual(calls.filter((m) => m === "POST").length, 3);

  // An answer that does not account for the batch is a failure: the report stays queued.
  const liar = async (url, init) => (init.method === "POST" ? new Response(JSON.stringify({ accepted: 5, duplicates: 0, rejected: [] }), { status: 200 }) : fetch(url, init));
  const l = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: liar, retries: 1, backoffMs: 1 });
  await l.report("minutes", 1);
  await assert.rejects(l.flush(), /unavailable/);
  assert.equal(l.pending(), 1);
});

test("after one fetch, reports work offline with the cached definitions", async () => {
  const stateDir = mkdtempSync(join(tmpdir(), "ldpkit-offline-"));
  const online = new Reporter(collector.url, { token: INGEST, stateDir });
  await online.definition("theme");
  await online.close();
  const offline = new Reporter("http://127.0.0.1:9", { token: INGEST, stateDir, retries: 0, backoffMs: 1 });
  const receipt = await offline.report("minutes", 3);
  assert.equal(receipt.queued, true);
  await assert.rejects(offline.flush(), /unavailable/);
  assert.equal(offline.pending(), 1);
  await offline.close();
});

test("flushEveryMs delivers in the background", async () => {
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), flushEveryMs: 100 });
  await r.report("minutes", 7);
  assert.equal(r.pending(), 1);
  for (let i = 0; i < 50 && r.pending() > 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(r.pending(), 0);
  await r.close();
});

test("a sealed batch is sent again byte for byte and counted once when an answer is lost", async () => {
  const bodies = [];
  let lose = true;
  const lossy = async (url, init) => {
    if (init.method !== "POST") return fetch(url, init);
    bodies.push(Buffer.from(init.body).toString("hex"));
    const response = await fetch(url, init);
    if (lose) {
      lose = false;
      await response.arrayBuffer();
      throw new TypeError("network error after the collector stored the batch");
    }
    return response;
  };
  const r = new Reporter(collector.url, { token: INGEST, store: new MemoryStore(), fetch: lossy, backoffMs: 1 });
  await r.report("minutes", 11);
  await r.report("theme", "dark");
  const sent = await r.flush();
  assert.equal(bodies.length, 2);
  assert.equal(bodies[0], bodies[1], "the same sealed body, byte for byte");
  assert.equal(bodies[0].slice(0, 2), "83", "a v2 map: v, batch, blocks");
  assert.deepEqual([sent.sent, sent.duplicates], [0, 2]);
  assert.equal(r.pending(), 0);
});

test("a seeded random source repeats its reports; batch ids still come from the CSPRNG", async () => {
  assert.throws(() => new Reporter(collector.url, { token: INGEST, random: 7 }), /random must be a function/);
  assert.throws(() => seededRandom(-1), TypeError);
  assert.throws(() => seededRandom(new Uint8Array(16)), TypeError);
  assert.throws(() => seededRandom(1)(new Uint8Array(3)), RangeError);
  const seen = [];
  const bodies = [];
  const recording = async (url, init) => {
    if (init.method === "POST") bodies.push(new Uint8Array(init.body));
    return fetch(url, init);
  };
  for (const memoize of [false, false, true, true]) {
    const store = new MemoryStore();
    const r = new Reporter(collector.url, { token: INGEST, store, memoize, random: seededRandom(99), fetch: recording });
    await r.report("theme", "dark");
    await r.report("minutes", 12.5);
    await r.report("search", "météo");
    seen.push(store.state.outbox.map((x) => x.report).join(","));
    assert.equal((await r.flush()).sent, 3); // not a duplicate batch: a fresh random id
    await r.close();
  }
  assert.equal(seen[0], seen[1]); // the same words in, the same reports out
  assert.equal(seen[2], seen[3]); // memoized: the seeded secret keys the same randomness
  assert.notEqual(seen[0], seen[2]);
  // The batch id: bytes 12-27 of the body ({"v": 2, "batch": bin 16, ...}).
  assert.equal(new Set(bodies.map((b) => Buffer.from(b.subarray(12, 28)).toString("hex"))).size, 4);
});
