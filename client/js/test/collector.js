// A real `ldpkit serve` on loopback for the tests (stopped with SIGTERM at the end).
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { PYTHON } from "./python.js";

export const INGEST = "js-ingest";
export const READ = "js-read";

export async function startCollector(metricsToml) {
  const dir = mkdtempSync(join(tmpdir(), "ldpkit-js-"));
  writeFileSync(join(dir, "collector.toml"), `[collector]\ndatabase = "collector.sqlite3"\n\n[tokens]\ningest = ["${INGEST}"]\nread = ["${READ}"]\n\n${metricsToml}`);
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
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.on("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
