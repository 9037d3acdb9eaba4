// A real `ldpkit serve` on loopback for the tests (stopped with SIGTERM at the end).
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { PYTHON } from "./python.js";

export const INGEST = "js-ingest"; // a device token: one device's reports a batch
export const RELAY = "js-relay"; // many devices' (the simulations)
export const READ = "js-read";
export const ADMIN = "js-admin";

/** `settings`: more lines of the [collector] table. */
export async function startCollector(metricsToml, settings = "") {
  const dir = mkdtempSync(join(tmpdir(), "ldpkit-js-"));
  const tokens = `[tokens]\ningest = ["${INGEST}"]\nrelay = ["${RELAY}"]\nread = ["${READ}"]\nadmin = ["${ADMIN}"]`;
  writeFileSync(join(dir, "collector.toml"), `[collector]\ndatabase = "collector.sqlite3"\n${settings}\n\n${tokens}\n\n${metricsToml}`);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LDPKIT_")));
  const child = spawn(PYTHON, ["-m", "ldpkit.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--config", "collector.toml", "--no-access-log"], { cwd: dir, env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the collector did not start:\n${log}`)), 30000);
    child.stderr.on("data", (chunk) => {
      log += chunk;
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`the collector exited (${code}):\n${log}`)));
  });
  return {
    url,
    dir,
    async estimates(metric, query = "") {
      const response = await fetch(`${url}/v1/estimates/${metric}?${query}`, { headers: { Authorization: `Bearer ${READ}` } });
      if (response.status !== 200) throw new Error(`estimates ${metric}: ${response.status} ${await response.text()}`);
      return response.json();
    },
    /** `method` /v1/`path` with the admin token; the answer's JSON. */
    async admin(method, path, body) {
      const init = { method, headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" } };
      if (body !== undefined) init.body = JSON.stringify(body);
      const response = await fetch(`${url}/v1/${path}`, init);
      if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
      return response.json();
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.on("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
