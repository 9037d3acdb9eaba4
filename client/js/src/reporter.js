// The Reporter: check, perturb and durably queue values on the device; deliver them to
// the collector in batches with retries. Mirrors ldpkit's Python client (docs/client.md):
// the same budget ledger, memoization, outbox and answer handling.

import { BUDGET_SLACK, DefinitionError, PERIODS, deviceCap, encodeValue, prepare } from "./definitions.js";
import { ChaChaWords } from "./chacha.js";
import { CryptoWords, cryptoRandom } from "./sampling.js";
import { defaultStore } from "./store.js";
import { CONTENT_TYPE, ID_SIZE, encodeSealedBatch, fromHex, toHex } from "./wire.js";

export const VERSION = "0.1.0";
const UNKNOWN_VERSION_GRACE = 600; // seconds a report refused as unknown_version is kept
const MAX_DEFINITIONS_BYTES = 16 * 1024 * 1024;
const MAX_ANSWER_BYTES = 1024 * 1024;
const MEMO_CONTEXT = "ldpkit/memo/js-v1\u0000";
const ROLE_HEADER = "LDPKIT-Token-Role"; // what GET /v1/metrics says the token is
const ROLES = ["device", "relay", "read", "admin"];

export class LdpkitError extends Error {
  constructor(message, fields = {}) {
    super(message);
    this.name = new.target.name;
    Object.assign(this, fields);
  }
}
export class BudgetExceeded extends LdpkitError {}
export class OutboxFull extends LdpkitError {}
export class UnknownMetric extends LdpkitError {}
export class CollectorUnavailable extends LdpkitError {}
export class CollectorRejected extends LdpkitError {}

/** Unix seconds as "YYYY-MM-DD HH:MM UTC", as the Python client writes a renewal. */
const utcMinute = (seconds) => `${new Date(seconds * 1000).toISOString().slice(0, 16).replace("T", " ")} UTC`;
const fits = (spent, needed, budget) => spent + needed <= budget * (1 + BUDGET_SLACK) + BUDGET_SLACK;
const LONGEST_PERIOD = Math.max(...Object.values(PERIODS)); // a week

/**
 * The spending recorded under `name` ("*" for the total; `delta` for its delta) in every
 * window overlapping [start, start + seconds): when a period changes (day to week), what
 * was spent under the old one counts in the new (the Python client's ledger.overlapping).
 */
function overlapping(ledger, name, start, seconds, delta = false) {
  let sum = 0;
  for (const [key, value] of Object.entries(ledger)) {
    const [owner, length, from, kind] = key.split("|");
    if (owner !== name || (kind === "delta") !== delta) continue;
    const s = Number(from);
    if (s < start + seconds && start < s + Number(length)) sum += value;
  }
  return sum;
}

// What is left of a budget: 0 within the ledger's slack of it (the Python client's left_of), not a rounding residue.
const leftOf = (spent, budget) => {
  const left = budget - spent;
  return left < budget * BUDGET_SLACK + BUDGET_SLACK ? 0 : left;
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function readLimited(response, limit) {
  const declared = Number(response.headers.get("content-length"));
  if (declared > limit) throw new LdpkitError(`answer of ${declared} bytes is over ${limit}`);
  if (!response.body) return new Uint8Array(0);
  const reader = response.body.getReader();
  const parts = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > limit) {
      await reader.cancel();
      throw new LdpkitError(`answer over ${limit} bytes`);
    }
    parts.push(value);
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function retryAfterSeconds(value) {
  if (value == null) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

/** The JSON object of an error answer ({error, detail, ...}), or {} if it is none. */
function problemOf(bytes) {
  // An answer that is not the collector's JSON (a proxy's 401 page, say) still says what it
  // is: its first 200 bytes as the detail, as the Python client does.
  const text = new TextDecoder().decode(bytes);
  try {
    const data = JSON.parse(text);
    if (data && typeof data === "object" && !Array.isArray(data)) return { error: "error", detail: "", ...data };
  } catch {
    // not JSON: below
  }
  return { error: "error", detail: text.slice(0, 200) };
}

/**
 * Whether a 400 over_device_cap can be honoured: the batch carried more reports of the
 * stated version (in one bucket) than the stated cap, which then bounds that version in
 * `caps`. False for an answer that does not state them, or when the batch was within the
 * cap already: re-cutting could not help (and would loop), so it is refused like any 4xx.
 */
function lowerCap(problem, ordered, caps) {
  const { error, version, cap } = problem;
  if (error !== "over_device_cap" || typeof version !== "string" || !Number.isSafeInteger(cap) || cap < 1) return false;
  const perBucket = new Map();
  let most = 0;
  for (const r of ordered) {
    if (r.fp !== version) continue;
    const n = (perBucket.get(r.bucket) ?? 0) + 1;
    perBucket.set(r.bucket, n);
    most = Math.max(most, n);
  }
  if (most <= cap) return false;
  caps.set(version, cap);
  return true;
}

async function hmacKey(secretHex) {
  return globalThis.crypto.subtle.importKey("raw", fromHex(secretHex), { name: "HMAC", hash: "SHA-512" }, false, ["sign"]);
}

async function hmac(key, message) {
  return new Uint8Array(await globalThis.crypto.subtle.sign("HMAC", key, new TextEncoder().encode(message)));
}

/**
 * Reports values of an ldpkit collector's metrics with local differential privacy.
 *
 *   const r = new Reporter("https://collector.example", { token, stateDir });
 *   await r.report("theme", "dark");
 *   await r.flush();
 */
export class Reporter {
  constructor(url, options = {}) {
    if (typeof url !== "string" || !/^https?:\/\//.test(url)) throw new TypeError(`the collector URL must be http(s)://..., got ${String(url)}`);
    const { token, stateDir, store, fetch, clock, monotonic, memoize = true, totalBudget = null, totalPeriod = "day", batchSize = 500, maxOutbox = 10000, timeoutMs = 10000, retries = 4, backoffMs = 500, maxBackoffMs = 30000, maxRetryAfterMs = 300000, flushEveryMs = null, random = cryptoRandom } = options;
    if (flushEveryMs !== null && !(Number.isSafeInteger(flushEveryMs) && flushEveryMs >= 100)) throw new TypeError("flushEveryMs must be null or an integer >= 100");
    if (typeof token !== "string" || !token) throw new TypeError("token (the collector's ingest token) is required");
    if (!globalThis.crypto?.subtle || !globalThis.crypto.getRandomValues) {
      throw new LdpkitError("ldpkit needs WebCrypto (crypto.subtle): serve the page over https (or from localhost)");
    }
    if (typeof random !== "function") throw new TypeError("random must be a function that fills a typed array with random bytes");
    if (totalBudget !== null && !(totalBudget > 0)) throw new TypeError("totalBudget must be a positive number or null");
    if (!(totalPeriod in PERIODS)) throw new TypeError(`totalPeriod must be one of ${Object.keys(PERIODS).join(", ")}`);
    for (const [name, value] of Object.entries({ batchSize, maxOutbox, timeoutMs, retries: retries + 1, backoffMs, maxBackoffMs })) {
      if (!Number.isSafeInteger(value) || value <= 0) throw new TypeError(`${name} must be a positive integer`);
    }
    this.url = url.replace(/\/+$/, "");
    this.token = token;
    this.store = store ?? defaultStore(stateDir);
    this.fetch = fetch ?? globalThis.fetch.bind(globalThis);
    this.clock = clock ?? (() => Date.now() / 1000);
    // Seconds that only go forward, between answers of the collector (see time()).
    this.monotonic = monotonic ?? (() => performance.now() / 1000);
    this.anchor = null; // [the collector's time, this.monotonic()] at its latest answer
    this.memoize = memoize;
    this.random = random; // the device secret and un-memoized reports (never batch ids)
    this.totalBudget = totalBudget;
    this.totalSeconds = PERIODS[totalPeriod];
    this.totalPeriod = totalPeriod;
    this.settings = { batchSize, maxOutbox, timeoutMs, retries, backoffMs, maxBackoffMs, maxRetryAfterMs };
    this.warnings = [];
    this.state = null;
    this.defs = new Map();
    this.stale = true;
    this.lastRefresh = -Infinity;
    this.tokenRole = null; // "device" | "relay" | ...: what GET /v1/metrics last said
    this.queue = Promise.resolve();
    this.closed = false;
    this.timer = null;
    if (flushEveryMs !== null) {
      // Background delivery: a failed pass is retried at the next tick (reports stay queued).
      this.timer = setInterval(() => {
        if (this.state?.outbox.length) this.flush().catch((err) => this.warnings.push(`background flush: ${err.message}`));
      }, flushEveryMs);
      this.timer.unref?.(); // Node: never keeps the process alive
    }
  }

  /** Run `fn` after every earlier operation (one at a time: the state is shared). */
  serial(fn) {
    const run = this.queue.then(() => {
      if (this.closed) throw new LdpkitError("the reporter is closed");
      return fn();
    });
    this.queue = run.catch(() => {});
    return run;
  }

  async ready() {
    if (this.state) return;
    const state = await this.store.load();
    if (!state.secret) {
      const secret = new Uint8Array(32);
      this.random(secret);
      state.secret = toHex(secret);
      await this.store.save(state);
    }
    this.secretKey = await hmacKey(state.secret); // imported once: HMACs per report are cheap
    this.state = state;
    const cached = await this.store.loadDefinitions();
    this.etag = cached?.etag ?? null;
    this.cachedDefinitions = cached?.list ?? null;
    if (cached?.list) await this.install(cached.list);
  }

  async install(list) {
    const defs = new Map();
    const warnings = [];
    for (const raw of list) {
      try {
        const def = await prepare(raw);
        defs.set(def.name, def);
      } catch (err) {
        if (!(err instanceof DefinitionError)) throw err;
        warnings.push(err.message);
      }
    }
    this.defs = defs;
    this.warnings = warnings;
  }

  async request(method, path, body, headers = {}) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.settings.timeoutMs);
    try {
      const response = await this.fetch(this.url + path, {
        method,
        body,
        headers: { Authorization: `Bearer ${this.token}`, ...headers },
        signal: controller.signal,
      });
      this.observe(response);
      return response;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Anchor the device's time to the collector's: every answer carries its `Date` (whole
   * seconds); between answers the monotonic clock counts, which a wrong or corrected
   * wall clock does not move.
   */
  observe(response) {
    const seen = Date.parse(response?.headers?.get?.("date") ?? "");
    if (!(Number.isFinite(seen) && seen > 0)) return;
    this.anchor = [seen / 1000 + 0.5, this.monotonic()];
    // The device has seen the collector's time: only it prunes from now on (saved with
    // the state's next save: the answer's own, for a batch).
    if (this.state) this.state.anchoredSeen = Math.max(this.state.anchoredSeen ?? 0, this.anchor[0]);
  }

  /**
   * [the time reports are placed by, whether it is the collector's]: since an answer of
   * the collector, its time then plus the monotonic time elapsed; before (offline, a
   * fresh process), the device's clock.
   */
  time() {
    if (!this.anchor) return [this.clock(), false];
    const [seen, at] = this.anchor;
    return [seen + Math.max(0, this.monotonic() - at), true];
  }

  /**
   * The ledger's time at `now`: it never goes back. Anchored, only the collector times
   * seen count, so a device clock that ran ahead does not move the budget forward.
   */
  ledgerTime(now, anchored) {
    return Math.max(now, anchored ? (this.state.anchoredSeen ?? 0) : this.state.lastSeen);
  }

  /** Fetch the definitions (GET /v1/metrics, with the cached ETag). */
  async refresh() {
    const headers = this.etag && this.defs.size ? { "If-None-Match": this.etag } : {};
    let response;
    try {
      response = await this.request("GET", "/v1/metrics", undefined, headers);
    } catch (err) {
      throw new CollectorUnavailable(`cannot reach ${this.url}: ${err.message}`);
    }
    this.lastRefresh = this.clock();
    if (response.status === 200 || response.status === 304) {
      const role = response.headers.get(ROLE_HEADER);
      this.tokenRole = ROLES.includes(role) ? role : null;
    }
    if (response.status === 304) {
      await response.body?.cancel();
      this.stale = false;
      return;
    }
    const body = await readLimited(response, MAX_DEFINITIONS_BYTES);
    if (response.status !== 200) {
      const error = response.status >= 500 || response.status === 429 ? CollectorUnavailable : CollectorRejected;
      const { error: code, detail } = problemOf(body);
      throw new error(`GET /v1/metrics answered ${response.status}${code ? ` ${code}` : ""}${detail ? `: ${detail}` : ""}`, { status: response.status, error: code, detail });
    }
    let list;
    try {
      list = JSON.parse(new TextDecoder().decode(body)).metrics;
    } catch {
      throw new CollectorRejected("GET /v1/metrics did not answer JSON");
    }
    if (!Array.isArray(list)) throw new CollectorRejected("GET /v1/metrics: no list of metrics");
    await this.install(list);
    this.etag = response.headers.get("etag");
    this.cachedDefinitions = list;
    this.stale = false;
    await this.store.saveDefinitions({ list, etag: this.etag });
  }

  async definition(metric) {
    await this.ready();
    if (this.stale && this.clock() - this.lastRefresh > 60) {
      // At start (cached definitions may be old) and after a refusal that says they are.
      try {
        await this.refresh();
      } catch (err) {
        if (this.defs.size === 0) throw err;
        this.lastRefresh = this.clock(); // offline: report with the cached definitions
      }
    }
    let def = this.defs.get(metric);
    if (!def && this.clock() - this.lastRefresh > 60) {
      await this.refresh();
      def = this.defs.get(metric);
    }
    if (!def) {
      const known = [...this.defs.keys()].sort().join(", ") || "none";
      throw new UnknownMetric(`unknown metric ${JSON.stringify(String(metric)).slice(0, 80)}; the collector defines ${known}`, { metric });
    }
    return def;
  }

  sample(def, input, key) {
    return def.sample(input, key ? new ChaChaWords(key) : new CryptoWords(64, this.random));
  }

  /**
   * Check, perturb and durably queue one value. Resolves to a receipt once the report
   * is in the outbox; throws BudgetExceeded, UnknownMetric, TypeError (a bad value).
   */
  report(metric, value) {
    return this.serial(() => this.reportNow(metric, value));
  }

  async reportNow(metric, value) {
    const def = await this.definition(metric);
    const { input, clipped } = encodeValue(def, value);
    const state = this.state;
    const [now, anchored] = this.time();
    const ledgerNow = this.ledgerTime(now, anchored);
    const bucketSeconds = PERIODS[def.bucket];
    const budgetSeconds = PERIODS[def.budget_period];
    // The bucket and memo window are the report's own time's (so one memoized value goes
    // once into a bucket whatever the clock did); the budget windows are the ledger's.
    const bucket = Math.floor(now / bucketSeconds) * bucketSeconds;
    const memoWindow = Math.floor(now / budgetSeconds) * budgetSeconds;
    const window = Math.floor(ledgerNow / budgetSeconds) * budgetSeconds;
    const totalWindow = Math.floor(ledgerNow / this.totalSeconds) * this.totalSeconds;
    if (anchored) state.anchoredSeen = Math.max(state.anchoredSeen ?? 0, now);
    // Once the collector's time is known, only it prunes: a clock running ahead would
    // drop the ledger and memo of the real current windows.
    this.prune(state.anchoredSeen ? state.anchoredSeen : ledgerNow);
    const valueKey = input instanceof Uint8Array ? `s${toHex(input)}` : def.kind === "numeric" || def.kind === "distribution" ? `f${toHex(new Uint8Array(new Float64Array([input]).buffer))}` : `i${input}`;
    const message = `${def.fingerprint}|${valueKey}|${memoWindow}`;
    // One HMAC-SHA512 per report: bytes 0-15 are the stored memo tag, bytes 32-63 key the
    // report's permanent randomness (ChaCha20): parts of one PRF output, so the stored tag
    // reveals nothing of the key and cannot replay the randomness to test candidate values.
    const digest = this.memoize ? await hmac(this.secretKey, MEMO_CONTEXT + message) : null;
    const tag = digest ? toHex(digest.slice(0, 16)) : "";
    const memo = this.memoize ? state.memo[tag] : undefined;
    const receipt = { metric: def.name, fingerprint: def.fingerprint, bucket, memoized: memo !== undefined, queued: false, epsilon: 0, delta: 0, clipped };
    if (memo && memo.buckets.includes(bucket)) return receipt; // already queued or sent
    if (state.outbox.length >= this.settings.maxOutbox) {
      throw new OutboxFull(`the outbox holds ${state.outbox.length} reports (maxOutbox); flush first`);
    }
    const report = this.sample(def, input, digest?.slice(32, 64));
    if (!memo) {
      const metricKey = `${def.name}|${budgetSeconds}|${window}`;
      const totalKey = `*|${this.totalSeconds}|${totalWindow}`;
      const spent = overlapping(state.ledger, def.name, window, budgetSeconds);
      const totalSpent = overlapping(state.ledger, "*", totalWindow, this.totalSeconds);
      // The Python client's messages and fields (tests/fixtures/client_shapes.json).
      if (!fits(spent, def.epsilon, def.budget)) {
        const left = leftOf(spent, def.budget);
        const renewsAt = window + budgetSeconds;
        throw new BudgetExceeded(`privacy budget of metric ${JSON.stringify(def.name)} exhausted: a report costs epsilon ${def.epsilon} and ${left} of its ${def.budget} per ${def.budget_period} is left; it renews at ${utcMinute(renewsAt)}`, { metric: def.name, scope: "metric", budget: def.budget, left, needed: def.epsilon, renewsAt });
      }
      if (this.totalBudget !== null && !fits(totalSpent, def.epsilon, this.totalBudget)) {
        const left = leftOf(totalSpent, this.totalBudget);
        const renewsAt = totalWindow + this.totalSeconds;
        throw new BudgetExceeded(`total privacy budget exhausted: a report of metric ${JSON.stringify(def.name)} costs epsilon ${def.epsilon} and ${left} of the total ${this.totalBudget} per ${this.totalPeriod} (all metrics together) is left; it renews at ${utcMinute(renewsAt)}`, { metric: def.name, scope: "total", budget: this.totalBudget, left, needed: def.epsilon, renewsAt });
      }
      state.ledger[metricKey] = (state.ledger[metricKey] ?? 0) + def.epsilon;
      state.ledger[totalKey] = (state.ledger[totalKey] ?? 0) + def.epsilon;
      receipt.epsilon = def.epsilon;
      if (def.delta) {
        // (epsilon, delta) reports spend delta beside epsilon (basic composition); the
        // epsilon budget bounds their number, so delta needs no budget of its own.
        state.ledger[`${metricKey}|delta`] = (state.ledger[`${metricKey}|delta`] ?? 0) + def.delta;
        state.ledger[`${totalKey}|delta`] = (state.ledger[`${totalKey}|delta`] ?? 0) + def.delta;
        receipt.delta = def.delta;
      }
    }
    if (this.memoize) {
      state.memo[tag] = { until: memoWindow + budgetSeconds, buckets: [...(memo?.buckets ?? []), bucket] };
    }
    state.outbox.push({ seq: ++state.seq, metric: def.name, fp: def.fingerprint, bucket, report: toHex(report) });
    state.lastSeen = Math.max(state.lastSeen, now);
    await this.store.save(state);
    receipt.queued = true;
    return receipt;
  }

  prune(now) {
    const state = this.state;
    for (const key of Object.keys(state.ledger)) {
      const [, seconds, start] = key.split("|");
      // Kept a week (the longest period) past its window's end: until then it may
      // overlap a window of a period that changed.
      if (Number(start) + Number(seconds) + LONGEST_PERIOD <= now) delete state.ledger[key];
    }
    for (const [tag, memo] of Object.entries(state.memo)) if (memo.until <= now) delete state.memo[tag];
  }

  /**
   * Epsilon spent and left per metric (and in total) in the current windows: the Python
   * client's `budget().to_dict()` in camelCase (docs/client.md). `ledgerLost` is always
   * null: this client does not detect a lost store (the Python client names the loss).
   */
  budget() {
    if (!this.state) return { metrics: {}, total: null, ledgerLost: null };
    const now = this.ledgerTime(...this.time());
    const metrics = {};
    for (const def of this.defs.values()) {
      const seconds = PERIODS[def.budget_period];
      const start = Math.floor(now / seconds) * seconds;
      const spent = overlapping(this.state.ledger, def.name, start, seconds);
      const delta = def.delta ?? 0;
      metrics[def.name] = {
        metric: def.name,
        epsilon: def.epsilon,
        budget: def.budget,
        spent,
        left: leftOf(spent, def.budget),
        period: def.budget_period,
        periodStart: start,
        renewsAt: start + seconds,
        delta,
        deltaSpent: overlapping(this.state.ledger, def.name, start, seconds, true),
        deltaBudget: (def.budget / def.epsilon) * delta,
      };
    }
    let total = null;
    if (this.totalBudget !== null) {
      const start = Math.floor(now / this.totalSeconds) * this.totalSeconds;
      const spent = overlapping(this.state.ledger, "*", start, this.totalSeconds);
      const deltaSpent = overlapping(this.state.ledger, "*", start, this.totalSeconds, true);
      total = { budget: this.totalBudget, spent, left: leftOf(spent, this.totalBudget), period: this.totalPeriod, periodStart: start, renewsAt: start + this.totalSeconds, deltaSpent };
    }
    return { metrics, total, ledgerLost: null };
  }

  /** Reports queued and not yet acknowledged. */
  pending() {
    return this.state ? this.state.outbox.length : 0;
  }

  /**
   * Send every queued report, in batches carrying at most one device's cap of each
   * version and bucket (unless the token is a relay one). Retries network errors, 408,
   * 429 (too_many_requests, rate_limited, source_rate_limited) and 5xx with backoff
   * (honouring Retry-After); a batch refused as over_device_cap goes again within the
   * stated cap. Throws CollectorUnavailable when it gives up, or CollectorRejected on
   * other refusals. Queued reports are never lost: only those the collector acknowledged
   * (held ones included: `held` counts them) or refused for good leave the outbox.
   */
  flush() {
    return this.serial(() => this.flushNow());
  }

  async flushNow() {
    await this.ready();
    // The Python client's FlushResult.to_dict() in camelCase (docs/client.md).
    const result = { sent: 0, duplicates: 0, held: 0, rejected: 0, remaining: 0, deferred: 0, refusals: [] };
    let size = this.settings.batchSize;
    let failures = 0;
    const skip = new Set(); // refused as unknown_version in this flush: not again now
    const caps = this.deviceCaps();
    for (;;) {
      // A sealed batch is sent again byte for byte until answered (its id makes the
      // retry count once); otherwise seal the next reports, durably, before sending.
      const sealed = this.state.sealed ?? (await this.seal(size, skip, caps));
      if (!sealed) break;
      const bySeq = new Map(this.state.outbox.map((r) => [r.seq, r]));
      const ordered = sealed.seqs.map((seq) => bySeq.get(seq) ?? { seq, metric: "?" });
      const { status, retryAfter, answer, problem, reason } = await this.post(fromHex(sealed.body), ordered.length);
      if (answer) {
        failures = 0;
        await this.delivered(answer, ordered, skip, result);
        continue;
      }
      // Refused whole, nothing stored (413: too large; over_device_cap: more of a version
      // and bucket than the collector lets one device send): forget this seal and seal
      // the same reports again into smaller batches, or within the stated cap.
      if ((status === 413 && ordered.length > 1) || (status === 400 && lowerCap(problem, ordered, caps))) {
        if (status === 413) size = Math.max(1, Math.floor(ordered.length / 2));
        else this.stale = true; // a budget lowered since: the next report() fetches it
        this.state.sealed = null;
        await this.store.save(this.state);
        continue;
      }
      const fields = { status, error: problem.error, detail: problem.detail, retryAfter };
      if (status !== 0 && status !== 408 && status !== 429 && status < 500) {
        const within = problem.error === "over_device_cap" ? " (its reports were within the stated cap already)" : "";
        throw new CollectorRejected(`the collector refused the batch (${reason})${within}; the reports stay queued`, fields);
      }
      failures += 1;
      if (failures > this.settings.retries) {
        throw new CollectorUnavailable(`the collector is unavailable (${reason}) after ${failures} attempts; ${this.state.outbox.length} reports stay queued`, fields);
      }
      const backoff = Math.min(this.settings.maxBackoffMs, this.settings.backoffMs * 2 ** (failures - 1)) * (0.5 + Math.random() / 2);
      const wait = retryAfter === null ? backoff : Math.min(this.settings.maxRetryAfterMs, Math.max(backoff, retryAfter * 1000));
      await sleep(wait);
    }
    result.remaining = this.state.outbox.length;
    return result;
  }

  /**
   * The most reports of a version (by fingerprint) one batch may carry per bucket: one
   * device's (deviceCap), unless the collector said this is a relay token. A reporter is
   * one device whose ledger keeps each bucket within its cap, so cutting changes nothing
   * but when the clock was set back or the cap lowered; a token whose role is not known
   * yet (offline since start) is taken for a device token.
   */
  deviceCaps() {
    const caps = new Map();
    if (this.tokenRole !== "relay") for (const def of this.defs.values()) caps.set(def.fingerprint, deviceCap(def));
    return caps;
  }

  /**
   * Seal the next queued reports into a batch and store it before it is sent: at most
   * `size`, and of each version and bucket at most its cap (the rest go in the next
   * batches), skipping `skip`. Null when none is left.
   */
  async seal(size, skip, caps) {
    const groups = new Map();
    const taken = new Map();
    let count = 0;
    for (const r of this.state.outbox) {
      if (count >= size) break;
      const key = `${r.metric}|${r.fp}|${r.bucket}`;
      const n = taken.get(key) ?? 0;
      if (skip.has(r.seq) || n >= (caps.get(r.fp) ?? Infinity)) continue;
      taken.set(key, n + 1);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(r);
      count += 1;
    }
    if (count === 0) return null;
    const blocks = [...groups.values()];
    const id = globalThis.crypto.getRandomValues(new Uint8Array(ID_SIZE));
    const body = encodeSealedBatch(id, blocks.map((g) => ({ metric: g[0].metric, fp: g[0].fp, bucket: g[0].bucket, reports: g.map((r) => fromHex(r.report)) })));
    // The answer's indices count the reports through the blocks in order.
    this.state.sealed = { id: toHex(id), body: toHex(body), seqs: blocks.flat().map((r) => r.seq) };
    await this.store.save(this.state);
    return this.state.sealed;
  }

  /**
   * POST one batch: {status, retryAfter, answer} for an answer that accounts for every
   * report, else {status, retryAfter, problem, reason} (status 0: no usable answer).
   */
  async post(body, n) {
    let status = 0;
    let retryAfter = null;
    let bytes;
    try {
      const response = await this.request("POST", "/v1/reports", body, { "Content-Type": CONTENT_TYPE });
      status = response.status;
      retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
      bytes = await readLimited(response, MAX_ANSWER_BYTES);
    } catch (err) {
      return { status: 0, retryAfter: null, problem: {}, reason: `network error: ${err.message}` };
    }
    if (status !== 200) {
      const problem = problemOf(bytes);
      return { status, retryAfter, problem, reason: `${status} ${problem.error ?? ""}${problem.detail ? `: ${problem.detail}` : ""}`.trim() };
    }
    try {
      return { status, retryAfter, answer: this.accountFor(JSON.parse(new TextDecoder().decode(bytes)), n) };
    } catch {
      return { status: 0, retryAfter, problem: {}, reason: "an answer that does not account for the batch" };
    }
  }

  /** Apply a batch's answer: its reports leave the outbox but those kept (unknown_version for a while). */
  async delivered(answer, ordered, skip, result) {
    const deferred = this.state.deferred ?? (this.state.deferred = {});
    const drop = new Set(ordered.map((r) => r.seq));
    const now = this.clock();
    for (const { index, error, detail } of answer.rejected) {
      const row = ordered[index];
      let kept = false;
      if (error === "unknown_version") {
        const first = (deferred[row.seq] ??= now);
        if (now - first < UNKNOWN_VERSION_GRACE) {
          drop.delete(row.seq);
          skip.add(row.seq);
          kept = true;
        }
      }
      if (["unknown_metric", "unknown_version", "retired_metric"].includes(error)) this.stale = true;
      if (kept) result.deferred += 1;
      else result.rejected += 1;
      result.refusals.push({ metric: row.metric, error, detail: detail ?? "" });
    }
    for (const seq of drop) delete deferred[seq];
    this.state.outbox = this.state.outbox.filter((r) => !drop.has(r.seq));
    this.state.sealed = null; // answered: its kept reports go into a new batch
    await this.store.save(this.state);
    result.sent += answer.accepted;
    result.duplicates += answer.duplicates;
    result.held += answer.held ?? 0; // held for review by the collector's screening: delivered
  }

  /** The answer, if it accounts for every report sent (else it is a failed request). */
  accountFor(answer, n) {
    const count = (x, most = n) => Number.isSafeInteger(x) && x >= 0 && x <= most;
    if (!answer || !count(answer.accepted) || !count(answer.duplicates) || !Array.isArray(answer.rejected)) throw new Error("bad answer");
    if (answer.held !== undefined && !count(answer.held, answer.accepted)) throw new Error("bad answer"); // absent: collectors before issue 26
    const seen = new Set();
    for (const r of answer.rejected) {
      if (!r || !Number.isSafeInteger(r.index) || r.index < 0 || r.index >= n || seen.has(r.index) || typeof r.error !== "string") throw new Error("bad answer");
      seen.add(r.index);
    }
    if (answer.accepted + answer.duplicates + answer.rejected.length !== n) throw new Error("bad answer");
    return answer;
  }

  /** Flush what can be flushed quickly, then release the store. */
  async close({ flush = true } = {}) {
    if (this.closed) return;
    if (this.timer !== null) clearInterval(this.timer);
    if (flush && this.state?.outbox.length) {
      const { retries } = this.settings;
      this.settings.retries = 0;
      try {
        await this.flush();
      } catch {
        // kept in the outbox for next time
      } finally {
        this.settings.retries = retries;
      }
    }
    await this.queue;
    this.closed = true;
    await this.store.close();
  }
}
