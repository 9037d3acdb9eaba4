// Running ldpkit's Python side from the JavaScript tests: $LDPKIT_PYTHON, else the
// repository's .venv, else python3 (with ldpkit installed).
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const venv = fileURLToPath(new URL("../../../.venv/bin/python", import.meta.url));
export const PYTHON = process.env.LDPKIT_PYTHON || (existsSync(venv) ? venv : "python3");

const probe = spawnSync(PYTHON, ["-c", "import ldpkit"], { encoding: "utf8" });
if (probe.status !== 0) {
  throw new Error(
    `these tests run ldpkit's Python side (a collector, the conformance kit) with ${PYTHON}, ` +
      "which cannot import ldpkit: create the repository's venv first " +
      "(python3 -m venv .venv && .venv/bin/pip install -e '.[dev]') or set LDPKIT_PYTHON",
  );
}

/** `ldpkit <args>`; returns {status, stdout, stderr}. */
export function ldpkit(args, options = {}) {
  const result = spawnSync(PYTHON, ["-m", "ldpkit.cli", ...args], { encoding: "utf8", ...options });
  if (result.error) throw result.error;
  return result;
}
