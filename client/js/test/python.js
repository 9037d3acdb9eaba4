// Running ldpkit's Python side from the JavaScript tests: $LDPKIT_PYTHON, else the
// repository's .venv, else python3 (with ldpkit installed).
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const venv = fileURLToPath(new URL("../../../.venv/bin/python", import.meta.url));
export const PYTHON = process.env.LDPKIT_PYTHON || (existsSync(venv) ? venv : "python3");

/** `ldpkit <args>`; returns {status, stdout, stderr}. */
export function ldpkit(args, options = {}) {
  const result = spawnSync(PYTHON, ["-m", "ldpkit.cli", ...args], { encoding: "utf8", ...options });
  if (result.error) throw result.error;
  return result;
}
