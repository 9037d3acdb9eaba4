// One shape for the Python and JS clients: the cases of tests/fixtures/client_shapes.json,
// which tests/client/test_shapes.py reads too. The fixture's keys are the Python client's
// (snake_case); this client's are the same names in camelCase (docs/client.md).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { fingerprint } from "../src/canonical.js";
import { BudgetExceeded, MemoryStore, Reporter } from "../src/index.js";

const FIXTURE = new URL("../../../tests/fixtures/client_shapes.json", import.meta.url);
const CASES = JSON.parse(readFileSync(FIXTURE, "utf8"));

/** snake_case keys to camelCase, all the way down (metric names, which are keys too, have no "_x"). */
export function camel(value) {
  if (Array.isArray(value)) return value.map(camel);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.replace(/_([a-z])/g, (_, c) => c.toUpperCase()), camel(v)]));
}

/** A collector that serves `definitions` and answers every POST with `answer` (status, body). */
function serving(definitions, answer = null) {
  return async (url) => {
    if (url.endsWith("/v1/metrics")) return new Response(JSON.stringify({ metrics: definitions }), { status: 200, headers: { "content-type": "application/json" } });
    if (answer && url.endsWith("/v1/reports")) return new Response(answer.body, { status: answer.status });
    throw new Error(`unexpected ${url}`);
  };
}

for (const c of CASES.budget) {
  test(`budget() shape: ${c.name}`, async () => {
    const r = new Reporter("http://127.0.0.1:9", {
      token: "t",
      store: new MemoryStore(),
      fetch: serving(c.definitions),
      clock: () => c.clock,
      totalBudget: c.total_budget,
      totalPeriod: c.total_period,
    });
    for (const [metric, value] of c.reports) await r.report(metric, value);
    assert.deepEqual(r.budget(), camel(c.budget));
    await r.close({ flush: false });
  });
}

test("camel maps the fixture's names", () => {
  assert.deepEqual(camel({ period_start: 1, renews_at: [{ delta_spent: 2 }], ledger_lost: null }), { periodStart: 1, renewsAt: [{ deltaSpent: 2 }], ledgerLost: null });
});

for (const c of CASES.errors) {
  test(`error shape: ${c.name}`, async () => {
    const base = CASES.budget[0];
    const r = new Reporter("http://127.0.0.1:9", {
      token: "t",
      store: new MemoryStore(),
      fetch: serving(base.definitions, c.answer ?? null),
      clock: () => base.clock,
      totalBudget: base.total_budget,
      totalPeriod: base.total_period,
      retries: 1,
      backoffMs: 1,
    });
    for (const [metric, value] of c.reports) await r.report(metric, value);
    let error = null;
    try {
      if (c.answer) await r.flush();
      else await r.report(...c.report);
    } catch (err) {
      error = err;
    }
    assert.ok(error, "no error");
    assert.equal(error.constructor.name, c.js, error.message);
    for (const fact of c.facts) assert.match(error.message, new RegExp(fact), fact);
    for (const [name, value] of Object.entries(camel(c.fields))) assert.deepEqual(error[name], value, name);
    await r.close({ flush: false });
  });
}

for (const c of CASES.flush) {
  test(`flush() shape: ${c.name}`, async () => {
    const base = CASES.budget[0];
    let posts = 0;
    const collector = serving(base.definitions);
    const fetch = async (url, init) => {
      if (!url.endsWith("/v1/reports")) return collector(url, init);
      posts += 1;
      if (posts > 1) throw new Error("a second POST");
      return new Response(JSON.stringify(c.answer), { status: 200 });
    };
    const r = new Reporter("http://127.0.0.1:9", { token: "t", store: new MemoryStore(), fetch, clock: () => base.clock, retries: 1, backoffMs: 1 });
    for (const [metric, value] of c.reports) await r.report(metric, value);
    assert.deepEqual(await r.flush(), camel(c.flush));
    assert.equal(posts, 1);
    await r.close({ flush: false });
  });
}

test("the ledger admits a report within its slack of the budget, and none beyond (the Python client's rule)", async () => {
  // spent + epsilon <= budget (1 + 1e-9) + 1e-9 (docs/client.md): a budget a relative 1e-10
  // under three reports' epsilon takes the third (sums of epsilons are not exact), one
  // 1e-8 under it does not. The budget is not fingerprinted: served as is.
  const base = CASES.budget[0];
  const theme = base.definitions.find((d) => d.name === "theme");
  for (const [relative, admits] of [[-1e-10, 3], [-1e-8, 2]]) {
    const budget = 3 * theme.epsilon * (1 + relative);
    const r = new Reporter("http://127.0.0.1:9", { token: "t", store: new MemoryStore(), fetch: serving([{ ...theme, budget }]), clock: () => base.clock });
    let admitted = 0;
    for (const value of ["light", "dark", "system"]) {
      try {
        await r.report("theme", value);
        admitted += 1;
      } catch (err) {
        if (!(err instanceof BudgetExceeded)) throw err;
      }
    }
    assert.equal(admitted, admits, `budget ${budget}`);
    await r.close({ flush: false });
  }
});

test("a memo is of one metric version: the same value under a new fingerprint is a fresh report, and spends", async () => {
  // docs/protocol.md, "What a client keeps on the device": the same value of the same
  // version spends nothing. Another version (here the categories reordered: the same
  // keep, another fingerprint) is another mechanism's report, which the ledger must count.
  const base = CASES.budget[0];
  const theme = base.definitions.find((d) => d.name === "theme");
  const reordered = { ...theme, categories: [...theme.categories].reverse() };
  reordered.fingerprint = await fingerprint(reordered);
  assert.notEqual(reordered.fingerprint, theme.fingerprint);
  let served = [theme];
  const r = new Reporter("http://127.0.0.1:9", { token: "t", store: new MemoryStore(), fetch: (url) => serving(served)(url), clock: () => base.clock });
  const first = await r.report("theme", "dark");
  const again = await r.report("theme", "dark");
  assert.deepEqual([first.memoized, first.epsilon, again.memoized, again.epsilon, again.queued], [false, theme.epsilon, true, 0, false]);
  served = [reordered];
  await r.refresh();
  const other = await r.report("theme", "dark");
  assert.deepEqual([other.fingerprint, other.memoized, other.epsilon, other.queued], [reordered.fingerprint, false, theme.epsilon, true]);
  assert.equal(r.budget().metrics.theme.spent, 2 * theme.epsilon);
  await r.close({ flush: false });
});

test("once the collector answers, its time dates the budget windows: an offline excursion of the clock ahead leaves today's spending in force", async () => {
  // docs/client.md, "Device time": after a clock that ran ahead offline (here another
  // metric reported 400 days ahead), the first answer anchors the time and the real
  // windows apply with their spending intact. A spent day must stay spent.
  const DAY = 86400;
  const base = CASES.budget[0];
  const served = base.definitions.map((d) => (d.name === "theme" ? { ...d, budget: d.epsilon } : d)); // one report a day
  const t0 = base.clock;
  let online = true;
  let collectorTime = t0;
  let deviceClock = t0;
  const fetch = async (url) => {
    if (!online) throw new TypeError("fetch failed (offline)");
    if (!url.endsWith("/v1/metrics")) throw new Error(`unexpected ${url}`);
    const headers = { "content-type": "application/json", date: new Date(collectorTime * 1000).toUTCString() };
    return new Response(JSON.stringify({ metrics: served }), { status: 200, headers });
  };
  const store = new MemoryStore();
  const device = () => new Reporter("http://127.0.0.1:9", { token: "t", store, fetch, clock: () => deviceClock, monotonic: () => 0 });
  const first = device();
  assert.equal((await first.report("theme", "dark")).queued, true); // anchored at t0: today's budget spent
  await first.close({ flush: false });
  online = false;
  deviceClock = t0 + 400 * DAY;
  const away = device();
  assert.equal((await away.report("minutes", 12.5)).queued, true); // placed by the device's clock
  await away.close({ flush: false });
  online = true;
  collectorTime = t0 + 3600; // the same real day
  const back = device();
  await back.refresh();
  await assert.rejects(back.report("theme", "light"), BudgetExceeded);
  assert.equal(back.budget().metrics.theme.left, 0);
  await back.close({ flush: false });
});

test("spending counts in every window it overlaps: a budget_period changed from day to week keeps today's spending (as in Python)", async () => {
  // docs/client.md, "Privacy budget": what was spent this week under the daily budget
  // counts against the weekly one (the budget_period is not fingerprinted: one version).
  const base = CASES.budget[0];
  const theme = base.definitions.find((d) => d.name === "theme");
  let served = [{ ...theme, budget: theme.epsilon, budget_period: "day" }];
  const r = new Reporter("http://127.0.0.1:9", { token: "t", store: new MemoryStore(), totalBudget: 10 * theme.epsilon, totalPeriod: "day", fetch: (url) => serving(served)(url), clock: () => base.clock });
  assert.equal((await r.report("theme", "dark")).epsilon, theme.epsilon);
  served = [{ ...theme, budget: theme.epsilon, budget_period: "week" }];
  await r.refresh();
  await assert.rejects(r.report("theme", "light"), (err) => err instanceof BudgetExceeded && err.scope === "metric" && err.left === 0);
  const status = r.budget();
  assert.deepEqual([status.metrics.theme.period, status.metrics.theme.spent, status.metrics.theme.left], ["week", theme.epsilon, 0]);
  await r.close({ flush: false });
  // The total budget's period likewise (an option of the reporter: a new one on the same store).
  const store = new MemoryStore();
  const make = (totalPeriod) => new Reporter("http://127.0.0.1:9", { token: "t", store, totalBudget: theme.epsilon, totalPeriod, fetch: serving(base.definitions), clock: () => base.clock });
  const daily = make("day");
  await daily.report("theme", "dark");
  await daily.close({ flush: false });
  const weekly = make("week");
  await assert.rejects(weekly.report("theme", "light"), (err) => err instanceof BudgetExceeded && err.scope === "total");
  assert.equal(weekly.budget().total.spent, theme.epsilon);
  await weekly.close({ flush: false });
});
