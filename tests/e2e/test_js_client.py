"""The JavaScript client (client/js) in a real headless Chromium against ``ldpkit serve``.

The page is a web app on its own origin (https://app.test, which playwright serves: the
page and the client's ES modules from client/js/src at /ldpkit-js/); the collector on
127.0.0.1 lets that origin in with ``cors_origins``. Devices report through the
browser's fetch (CORS preflight included), WebCrypto and IndexedDB; the collector's
estimates cover the truth, and a reload finds the budget ledger and an empty outbox in
IndexedDB. The page's own device uses the ingest (device) token, whose role the page reads
from the CORS-exposed ``LDPKIT-Token-Role``; the simulated devices, many from one address,
a relay token.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldpkit.collector.launcher import environment_without_tokens, running_collector

from .browser import CHROMIUM, CHROMIUM_ARGS, require_browser

SRC = Path(__file__).resolve().parents[2] / "client" / "js" / "src"
INGEST, RELAY, READ = "browser-ingest", "browser-relay", "browser-read"
APP = "https://app.test"
NO_LNA = "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests"
PAGE = b"<!doctype html><meta charset=utf-8><title>An app</title><p>An app that reports."
THEMES = ["light", "dark", "système"]
DEVICES = 400
CONFIG = f"""
[collector]
database = "collector.sqlite3"
cors_origins = ["{APP}"]

[tokens]
ingest = ["{INGEST}"]
relay = ["{RELAY}"]
read = ["{READ}"]

[metrics.theme]
categories = {json.dumps(THEMES, ensure_ascii=False)}
epsilon = 3.0
mechanism = "oue"

[metrics.load_ms]
kind = "numeric"
bounds = [0, 1000]
epsilon = 3.0
mechanism = "hybrid"
"""

SCRIPT = """
async ([url, token, relay, devices]) => {
  const ldp = await import("/ldpkit-js/index.js");
  // One device: the default store (IndexedDB), WebCrypto, fetch.
  const r = new ldp.Reporter(url, { token });
  const receipt = await r.report("theme", "dark");
  const window = r.budget().metrics.theme.periodStart;  // the day the budget was spent in
  const flushed = await r.flush();
  const again = await r.report("theme", "dark");
  const role = r.tokenRole;
  // Simulated devices (each its own memory store), the same code path, with a relay
  // token (a device token's batches from one address are rate limited).
  const definitions = { list: r.cachedDefinitions, etag: null };
  let truth = 0;
  let sum = 0;
  for (let i = 0; i < devices; i++) {
    const store = new ldp.MemoryStore({ definitions });
    const random = ldp.seededRandom(i);
    const d = new ldp.Reporter(url, { token: relay, store, memoize: false, random });
    const theme = i % 5 < 3 ? "dark" : i % 5 === 3 ? "light" : "système";
    if (theme === "dark") truth++;
    await d.report("theme", theme);
    const ms = (i * 7919) % 1000;
    sum += ms;
    await d.report("load_ms", ms);
    await d.flush();
  }
  await r.close();
  const dark = (truth + 1) / (devices + 1);
  return { receipt, window, flushed, again, role, dark, mean: sum / devices };
}
"""


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("browser")
    (directory / "collector.toml").write_text(CONFIG)
    with running_collector(
        "collector.toml", cwd=directory, env=environment_without_tokens()
    ) as running:
        yield running.url


# The simulated devices draw from seeded ChaCha20 keystreams (the reporter's `random`
# option, un-memoized), so every run sends the same reports but one (the first device's,
# from WebCrypto) and the 99.9% intervals give the same verdict each time. Unseeded, a
# correct run failed about one time in 500 (CI saw it once, a 2.5e-5 tail).
LEVEL = 0.999


def _estimates(url: str, metric: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/v1/estimates/{metric}?level={LEVEL}", headers={"Authorization": f"Bearer {READ}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        data: dict[str, Any] = json.load(response)
    return data


def _serve_app(route: Any) -> None:
    url = route.request.url
    if "/ldpkit-js/" not in url:
        route.fulfill(status=200, body=PAGE, content_type="text/html")
        return
    name = url.split("/ldpkit-js/", 1)[1].split("?")[0]
    path = (SRC / name).resolve()
    if path.parent != SRC or not path.is_file():
        route.fulfill(status=404, body="not found")
        return
    route.fulfill(status=200, body=path.read_bytes(), content_type="text/javascript")


def test_reports_from_a_page(collector: str) -> None:
    sync_playwright = require_browser()
    with sync_playwright() as p:
        # A public origin calling a loopback address needs the user's "local network
        # access" permission (Chromium's LNA); a real collector is not on loopback.
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, NO_LNA])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route(APP + "/**", _serve_app)
            page.goto(APP + "/")
            out = page.evaluate(SCRIPT, [collector, INGEST, RELAY, DEVICES])
            assert out["receipt"]["queued"] and out["receipt"]["epsilon"] == 3.0
            assert out["flushed"]["sent"] == 1 and out["flushed"]["held"] == 0
            assert out["role"] == "device"  # read through CORS
            assert out["again"]["memoized"] and not out["again"]["queued"]
            # A reload: IndexedDB kept the ledger (no budget left) and the outbox is empty.
            page.reload()
            after = page.evaluate(
                """async ([url, token]) => {
                  const ldp = await import("/ldpkit-js/index.js");
                  const r = new ldp.Reporter(url, { token });
                  await r.definition("theme");
                  const window = r.budget().metrics.theme.periodStart;
                  let refused = "";
                  try { await r.report("theme", "light"); } catch (e) { refused = e.name; }
                  const left = r.budget().metrics.theme.left;
                  return { left, pending: r.pending(), refused, window };
                }""",
                [collector, INGEST],
            )
            if after.pop("window") == out["window"]:
                assert after == {"left": 0, "pending": 0, "refused": "BudgetExceeded"}
            else:  # a new day began between the two: its budget is whole (CI once crossed)
                assert after == {"left": 0, "pending": 1, "refused": ""}
            assert errors == []
        finally:
            browser.close()
    theme = _estimates(collector, "theme")
    assert theme["n"] == DEVICES + 1
    dark = next(item for item in theme["items"] if item["category"] == "dark")
    assert dark["low"] <= out["dark"] <= dark["high"]
    load = _estimates(collector, "load_ms")
    assert load["n"] == DEVICES
    assert load["low"] <= out["mean"] <= load["high"]
