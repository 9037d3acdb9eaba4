// ldpkit's client for browsers and Node (docs/protocol.md is the protocol it speaks).
export { BudgetExceeded, CollectorRejected, CollectorUnavailable, LdpkitError, OutboxFull, Reporter, UnknownMetric, VERSION } from "./reporter.js";
export { DefinitionError, checkDerived, deviceCap, encodeValue, prepare } from "./definitions.js";
export { CryptoWords, ListWords, MECHANISMS, olhBucket, sampler } from "./sampling.js";
export { canonicalParameters, fingerprint } from "./canonical.js";
export { CONTENT_TYPE, encodeSealedBatch } from "./wire.js";
export { FileStore, IndexedDBStore, MemoryStore } from "./store.js";
export { seededRandom } from "./chacha.js";
