// Type declarations of ldpkit's JavaScript client (ES modules, no build step).

export type Period = "hour" | "day" | "week";
export type Mechanism =
  | "grr" | "rr" | "sue" | "oue" | "olh" | "ss" | "hr" | "exponential"
  | "duchi" | "piecewise" | "hybrid" | "laplace" | "gaussian"
  | "hh" | "square_wave" | "rollup" | "levels" | "joint" | "joint_marginals" | "prefix_sketch";
/** A category, a number, a leaf path, a table row (attribute -> category) or a string. */
export type Value = string | number | Record<string, string>;
/**
 * What the collector says a token is (header `LDPKIT-Token-Role` of GET /v1/metrics):
 * `device` (an ingest token: a batch carries one device's reports), `relay` (many
 * devices': server-side batching), `read` or `admin`.
 */
export type TokenRole = "device" | "relay" | "read" | "admin";
export declare const VERSION: string;
export declare const MECHANISMS: readonly Mechanism[];
export declare const CONTENT_TYPE: string;

/** A metric definition as GET /v1/metrics serves it. */
export interface Definition {
  name: string;
  kind: "categorical" | "numeric" | "distribution" | "hierarchy" | "table" | "strings";
  mechanism: string;
  resolved_mechanism: Mechanism;
  epsilon: number;
  bucket: Period;
  budget: number;
  budget_period: Period;
  fingerprint: string;
  report_size: number;
  categories?: string[];
  bounds?: [number, number];
  /** (epsilon, delta) metrics (mechanism "gaussian"): the delta one report spends. */
  delta?: number;
  resolution?: number;
  separator?: string;
  dimensions?: [string, string[]][];
  max_length?: number;
  description?: string;
  /** The sampler's constants (docs/protocol.md, "Derived parameters"). */
  derived: Record<string, unknown>;
}

/** Where a reporter keeps its state (secret, ledger, memo, outbox, definitions). */
export interface CachedDefinitions {
  list: Definition[];
  etag: string | null;
}
export interface Store {
  load(): Promise<object>;
  save(state: object): Promise<void>;
  loadDefinitions(): Promise<CachedDefinitions | null>;
  saveDefinitions(cached: CachedDefinitions): Promise<void>;
  close(): Promise<void>;
}
/** Keeps nothing across restarts (tests, simulations); `definitions` may be shared. */
export declare class MemoryStore implements Store {
  constructor(options?: { definitions?: CachedDefinitions | null });
  load(): Promise<object>;
  save(state: object): Promise<void>;
  loadDefinitions(): Promise<CachedDefinitions | null>;
  saveDefinitions(cached: CachedDefinitions): Promise<void>;
  close(): Promise<void>;
}
/** Node: `<stateDir>/ldpkit-state.json`, replaced atomically (fsync, rename) on every change. */
export declare class FileStore implements Store {
  constructor(stateDir: string);
  load(): Promise<object>;
  save(state: object): Promise<void>;
  loadDefinitions(): Promise<CachedDefinitions | null>;
  saveDefinitions(cached: CachedDefinitions): Promise<void>;
  close(): Promise<void>;
}
/** Browsers: one IndexedDB record (database `ldpkit`). */
export declare class IndexedDBStore implements Store {
  constructor(name?: string);
  load(): Promise<object>;
  save(state: object): Promise<void>;
  loadDefinitions(): Promise<CachedDefinitions | null>;
  saveDefinitions(cached: CachedDefinitions): Promise<void>;
  close(): Promise<void>;
}

export interface ReporterOptions {
  /** The collector's ingest token. */
  token: string;
  /** Node: the folder holding the state (default in browsers: IndexedDB). */
  stateDir?: string;
  store?: Store;
  fetch?: typeof fetch;
  /** The device's wall clock, unix seconds, used until the collector's time is known (its answers' `Date`); tests pass their own. */
  clock?: () => number;
  /** Seconds that only go forward (default `performance.now() / 1000`): the time between the collector's answers; tests pass their own. */
  monotonic?: () => number;
  /** The same value in the same budget window gives the same report, spending nothing more (default true). */
  memoize?: boolean;
  /**
   * Fills a typed array with random bytes, in place (default: `crypto.getRandomValues`).
   * It draws the device secret and un-memoized reports; batch ids always come from the
   * platform CSPRNG. Only tests and simulations pass a seeded one.
   */
  random?: (bytes: Uint8Array | Uint32Array) => unknown;
  /** Epsilon all metrics together may spend per `totalPeriod` (default: no total budget). */
  totalBudget?: number | null;
  totalPeriod?: Period;
  batchSize?: number;
  maxOutbox?: number;
  timeoutMs?: number;
  retries?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  maxRetryAfterMs?: number;
  /** Send queued reports in the background every this many ms (default: only on flush()). */
  flushEveryMs?: number | null;
}

export interface Receipt {
  metric: string;
  fingerprint: string;
  /** Start of the report's time bucket, unix seconds. */
  bucket: number;
  /** The value was already reported in this budget window: the same report, no new epsilon. */
  memoized: boolean;
  /** False when this very report was already queued for this bucket. */
  queued: boolean;
  /** Epsilon this report spent. */
  epsilon: number;
  /** Delta this report spent ((epsilon, delta) metrics; else 0). */
  delta: number;
  /** The number was outside the bounds and clipped to them. */
  clipped: boolean;
}

/** The Python client's `FlushResult.to_dict()` (the same names; docs/client.md). */
export interface FlushResult {
  /** Reports newly accepted by the collector. */
  sent: number;
  /** Reports it already had (retries of delivered ones). */
  duplicates: number;
  /** Of the sent, those the collector's screening holds for an admin's review: delivered all the same. */
  held: number;
  /** Reports refused for good (they left the outbox). */
  rejected: number;
  /** Reports left in the outbox after the flush. */
  remaining: number;
  /** Of the remaining, those refused as unknown_version and kept for a later flush. */
  deferred: number;
  /** Every refusal, dropped or kept, in the order answered. */
  refusals: { metric: string; error: string; detail: string }[];
}

/** The Python client's `MetricBudget` (snake_case there: `period_start`, `renews_at`, ...). */
export interface MetricBudget {
  metric: string;
  /** The epsilon one report spends. */
  epsilon: number;
  budget: number;
  spent: number;
  left: number;
  period: Period;
  /** Start of the current budget window (unix seconds). */
  periodStart: number;
  renewsAt: number;
  /** The delta one report spends (0 for pure epsilon metrics). */
  delta: number;
  /** Delta spent in the window (basic composition). */
  deltaSpent: number;
  /** The delta the epsilon budget allows per window: (budget / epsilon) reports of delta. */
  deltaBudget: number;
}

export interface BudgetStatus {
  metrics: Record<string, MetricBudget>;
  total: { budget: number; spent: number; left: number; period: Period; periodStart: number; renewsAt: number; deltaSpent: number } | null;
  /** Always null here: this client does not detect a lost store (the Python client gives the loss's message). */
  ledgerLost: string | null;
}

export declare class Reporter {
  constructor(url: string, options: ReporterOptions);
  /** Problems with served definitions (they are skipped). */
  readonly warnings: string[];
  /** What the collector said the token is at the last GET /v1/metrics (null: not asked yet, or a collector that does not say). */
  readonly tokenRole: TokenRole | null;
  ready(): Promise<void>;
  refresh(): Promise<void>;
  definition(metric: string): Promise<Definition>;
  report(metric: string, value: Value): Promise<Receipt>;
  flush(): Promise<FlushResult>;
  budget(): BudgetStatus;
  pending(): number;
  close(options?: { flush?: boolean }): Promise<void>;
}

export declare class LdpkitError extends Error {}
export declare class BudgetExceeded extends LdpkitError {
  metric: string;
  scope: "metric" | "total";
  /** Epsilon per period of the exhausted budget, what is left of it, and what the report needed. */
  budget: number;
  left: number;
  needed: number;
  renewsAt: number;
}
export declare class OutboxFull extends LdpkitError {}
export declare class UnknownMetric extends LdpkitError {
  metric: string;
}
export declare class CollectorUnavailable extends LdpkitError {
  /** The last attempt's HTTP status (0: a network error or an answer that did not account for the batch). */
  status?: number;
  /** The collector's error code (`too_many_requests`, `source_rate_limited`, ...). */
  error?: string;
  detail?: string;
  /** The last attempt's Retry-After, in seconds (null: none). */
  retryAfter?: number | null;
}
export declare class CollectorRejected extends LdpkitError {
  status?: number;
  /** The collector's error code (`forbidden`, `over_device_cap`, ...). */
  error?: string;
  detail?: string;
  retryAfter?: number | null;
}
export declare class DefinitionError extends Error {}

/** A source of uniform 32-bit words. */
export interface Words {
  word(): number;
}
/** Words from a random source (default: the platform CSPRNG), `size` at a time. */
export declare class CryptoWords implements Words {
  constructor(size?: number, random?: (bytes: Uint32Array) => unknown);
  word(): number;
}
export declare class ListWords implements Words {
  constructor(words: number[]);
  readonly used: number;
  word(): number;
}
/** The report bytes for a mechanism input (a category index or a clipped number). */
export declare function sampler(definition: Definition): (input: number | Uint8Array, words: Words) => Uint8Array;
export declare function olhBucket(v: number, a: bigint, b: bigint, g: number): number;
/** A seeded `random` for tests and simulations: the ChaCha20 keystream under a 32-byte key or an integer seed. */
export declare function seededRandom(seed: number | Uint8Array): (bytes: Uint8Array | Uint32Array) => Uint8Array | Uint32Array;
export declare function checkDerived(definition: Definition): void;
/**
 * The most reports of a definition's version one device's ledger lets it queue per bucket
 * (a device token's batch may carry no more): floor(budget / epsilon), with the ledger's
 * slack, times the budget windows a bucket spans; ldpkit's `MetricDefinition.device_cap`.
 */
export declare function deviceCap(definition: Pick<Definition, "epsilon" | "budget" | "bucket" | "budget_period">): number;
export declare function prepare(raw: unknown): Promise<Definition & { sample: (input: number | Uint8Array, words: Words) => Uint8Array }>;
export declare function encodeValue(definition: Definition, value: Value): { input: number | Uint8Array; clipped: boolean };
export declare function canonicalParameters(definition: Definition): string;
export declare function fingerprint(definition: Definition): Promise<string>;
/** A sealed (v2) batch: one random 16-byte id for the whole batch. */
export declare function encodeSealedBatch(
  batch: Uint8Array,
  blocks: { metric: string; fp: string; bucket: number; reports: Uint8Array[] }[],
): Uint8Array;
