// Where a reporter keeps its state: the device secret, the budget ledger, the memo and
// the outbox of reports not yet acknowledged, as one JSON document written atomically
// after every change (Node: a temporary file, fsync, rename; browsers: one IndexedDB
// transaction), so a report that `report()` returned for survives a crash, a reload or
// the collector being away. The cached definitions are a second document, written only
// when they change (they can be large; the state is written on every report).

export function emptyState() {
  return { version: 1, secret: null, ledger: {}, memo: {}, outbox: [], seq: 0, lastSeen: 0, anchoredSeen: 0, sealed: null };
}

/** Keeps nothing across restarts (tests, simulations). */
export class MemoryStore {
  constructor({ definitions = null } = {}) {
    this.state = null;
    this.definitions = definitions; // {list, etag}: e.g. shared by simulated devices
  }
  async loadDefinitions() {
    return this.definitions;
  }
  async saveDefinitions(cached) {
    this.definitions = cached;
  }
  async load() {
    return this.state ? structuredClone(this.state) : emptyState();
  }
  async save(state) {
    this.state = structuredClone(state);
  }
  async close() {}
}

/** Node: `<stateDir>/ldpkit-state.json`, replaced atomically on every save. */
export class FileStore {
  constructor(stateDir) {
    this.dir = stateDir;
    this.fs = null;
    this.path = null;
  }
  async open() {
    if (this.fs) return;
    this.fs = await import("node:fs/promises");
    const { join } = await import("node:path");
    await this.fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    this.path = join(this.dir, "ldpkit-state.json");
    this.definitionsPath = join(this.dir, "ldpkit-definitions.json");
  }
  async readJson(path) {
    try {
      return JSON.parse(await this.fs.readFile(path, "utf8"));
    } catch (err) {
      if (err.code === "ENOENT") return null;
      throw err;
    }
  }
  async writeJson(path, value) {
    const tmp = `${path}.${process.pid}.tmp`;
    const handle = await this.fs.open(tmp, "w", 0o600);
    try {
      await handle.writeFile(JSON.stringify(value));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await this.fs.rename(tmp, path);
  }
  async loadDefinitions() {
    await this.open();
    return this.readJson(this.definitionsPath);
  }
  async saveDefinitions(cached) {
    await this.open();
    await this.writeJson(this.definitionsPath, cached);
  }
  async load() {
    await this.open();
    const state = await this.readJson(this.path);
    if (state === null) return emptyState();
    if (state.version !== 1) throw new Error(`${this.path} is not an ldpkit state file`);
    return { ...emptyState(), ...state };
  }
  async save(state) {
    await this.open();
    await this.writeJson(this.path, state);
  }
  async close() {}
}

/** Browsers: one record in IndexedDB database `ldpkit` (store `state`, key `name`). */
export class IndexedDBStore {
  constructor(name = "default") {
    this.name = name;
    this.db = null;
  }
  async open() {
    if (this.db) return this.db;
    this.db = await new Promise((resolve, reject) => {
      const request = globalThis.indexedDB.open("ldpkit", 1);
      request.onupgradeneeded = () => request.result.createObjectStore("state");
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
    return this.db;
  }
  async run(mode, action) {
    const db = await this.open();
    return new Promise((resolve, reject) => {
      const tx = db.transaction("state", mode, { durability: "strict" });
      const request = action(tx.objectStore("state"));
      let result;
      request.onsuccess = () => {
        result = request.result;
      };
      tx.oncomplete = () => resolve(result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }
  async load() {
    const state = await this.run("readonly", (s) => s.get(this.name));
    return state ? { ...emptyState(), ...state } : emptyState();
  }
  async save(state) {
    await this.run("readwrite", (s) => s.put(state, this.name));
  }
  async loadDefinitions() {
    return (await this.run("readonly", (s) => s.get(`${this.name}/definitions`))) ?? null;
  }
  async saveDefinitions(cached) {
    await this.run("readwrite", (s) => s.put(cached, `${this.name}/definitions`));
  }
  async close() {
    this.db?.close();
    this.db = null;
  }
}

/** The store for `stateDir` (Node), IndexedDB (browsers), or memory. */
export function defaultStore(stateDir) {
  if (stateDir != null) return new FileStore(stateDir);
  if (globalThis.indexedDB) return new IndexedDBStore();
  return new MemoryStore();
}
