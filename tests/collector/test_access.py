"""Access: every route against every kind of token, token hashes, constant-time lookup,
tokens kept out of logs and errors, and per-token ingest rate limits.

The matrix comes from the Access table of docs/protocol.md, so the documentation and
the collector cannot drift apart; a route the app serves but the table does not list
fails too.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from ldpkit import cli, wire
from ldpkit.collector.auth import TokenRegistry, token_hash
from ldpkit.collector.config import ConfigError, Tokens, config_from_dict
from ldpkit.collector.limits import IngestLimiter
from tests.harness import Answer, ThreadedCollector

from .helpers import ADMIN, INGEST, METRICS, READ, RELAY, batch, block_of, grr_reports

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
COLUMNS = ("none", "wrong", "ingest", "relay", "read", "admin")
WRONG = "not-a-configured-token"
CLI = (sys.executable, "-m", "ldpkit.cli")
JSON_CT = "application/json"


def access_table() -> dict[tuple[str, str], dict[str, int]]:
    """``{(method, path template): {column: status}}`` from docs/protocol.md, ## Access."""
    text = PROTOCOL.read_text()
    section = text.split("\n## Access\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table: dict[tuple[str, str], dict[str, int]] = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        method, path = cells[0].strip("`").split(" ", 1)
        table[(method, path)] = dict(zip(COLUMNS, map(int, cells[1:]), strict=True))
    return table


TABLE = access_table()


def headers_for(column: str, *, basic: bool = False) -> dict[str, str]:
    if column == "none":
        return {}
    if column == "wrong":
        return {"Authorization": f"Basic {INGEST}" if basic else f"Bearer {WRONG}"}
    token = {"ingest": INGEST, "relay": RELAY, "read": READ, "admin": ADMIN}[column]
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedCollector]:
    from .helpers import make_config

    config = make_config(tmp_path_factory.mktemp("access") / "c.sqlite3", synchronous="normal")
    with ThreadedCollector(config) as s:
        yield s


PUT_COUNTER = iter(range(10**6))


def send(served: ThreadedCollector, method: str, template: str, headers: dict[str, str]) -> Answer:
    path = template.replace("{file}", "ui.js")
    body = None
    headers = dict(headers)
    if template == "/v1/reports":
        body = batch(block_of("theme", grr_reports([1])))  # one device's: within its cap
        headers["Content-Type"] = wire.CONTENT_TYPE
    elif method == "PUT":
        path = path.replace("{name}", f"access-{next(PUT_COUNTER)}")
        body = json.dumps({"categories": ["x", "y"], "epsilon": 1.0}).encode()
        headers["Content-Type"] = "application/json"
    elif method == "DELETE":  # retire a metric made for the purpose
        name = f"access-{next(PUT_COUNTER)}"
        made = served.request(
            "PUT",
            f"/v1/metrics/{name}",
            json.dumps({"categories": ["x", "y"], "epsilon": 1.0}).encode(),
            {**headers_for("admin"), "Content-Type": "application/json"},
        )
        assert made.status == 201, made
        path = path.replace("{name}", name)
    path = path.replace("{name}", "theme").replace("{id}", "1")
    return served.request(method, path, body, headers)


CELLS = [(route, column) for route in TABLE for column in COLUMNS]


@pytest.mark.parametrize(("route", "column"), CELLS, ids=[f"{r[0]} {r[1]}-{c}" for r, c in CELLS])
def test_every_route_with_every_kind_of_token(
    served: ThreadedCollector, route: tuple[str, str], column: str
) -> None:
    method, template = route
    expected = TABLE[route][column]
    variants = [headers_for(column)]
    if column == "wrong":
        variants.append(headers_for(column, basic=True))  # another scheme, a valid token
    for headers in variants:
        answer = send(served, method, template, headers)
        assert answer.status == expected, (method, template, column, answer.body[:200])
        if answer.status == 401:
            assert json.loads(answer.body)["error"] == "unauthorized"
            assert answer.headers["www-authenticate"].startswith("Bearer")
        elif answer.status == 403:
            assert json.loads(answer.body)["error"] == "forbidden"
        for token in (INGEST, RELAY, READ, ADMIN, WRONG):
            assert token.encode() not in answer.body  # never echoed
        if method == "GET":  # HEAD answers the same, without a body
            head = send(served, "HEAD", template, headers)
            assert (head.status, head.body) == (expected, b"")


def test_the_table_lists_every_route(served: ThreadedCollector) -> None:
    served_routes = set()
    for route in served.app.router.routes():
        resource = route.resource
        assert resource is not None
        template = resource.canonical
        if isinstance(resource, web.StaticResource):
            template += "/{file}"
        if route.method != "HEAD":
            served_routes.add((route.method, template))
    assert served_routes == set(TABLE)


@pytest.mark.parametrize("column", COLUMNS)
def test_route_errors_come_before_the_token(served: ThreadedCollector, column: str) -> None:
    headers = headers_for(column)
    answer = served.request("GET", "/v2/nothing", None, headers)
    assert answer.status == 404 and json.loads(answer.body)["error"] == "not_found"
    answer = served.request("PATCH", "/v1/metrics/theme", None, headers)
    assert answer.status == 405 and json.loads(answer.body)["error"] == "method_not_allowed"


# --- token hashes ----------------------------------------------------------------------
def test_documented_hash_recipe_matches() -> None:
    recipe = "sha256:" + hashlib.sha256(b"secret").hexdigest()
    assert token_hash("secret") == recipe


def test_tokens_given_as_hashes(tmp_path: Path) -> None:
    plain_ingest, plain_read = "ingest-plain-77", "read-hashed-88"
    config = config_from_dict(
        {
            "collector": {"database": str(tmp_path / "c.sqlite3")},
            "tokens": {
                "ingest": [plain_ingest, token_hash("ingest-hashed-99")],
                "read": [token_hash(plain_read).upper().replace("SHA256:", "sha256:")],
                "admin": [token_hash(ADMIN)],
            },
            "metrics": {"theme": METRICS["theme"]},
        },
        environ={},
    )
    with ThreadedCollector(config) as s:
        for token, path, status in [
            (plain_ingest, "/v1/metrics", 200),
            ("ingest-hashed-99", "/v1/metrics", 200),
            (plain_read, "/v1/estimates/theme", 200),
            (ADMIN, "/v1/metrics/theme/versions", 200),
            ("ingest-hashed-99", "/v1/estimates/theme", 403),
            # The hash is not a token: presenting it does not authenticate.
            (token_hash("ingest-hashed-99"), "/v1/metrics", 401),
            (token_hash(plain_read), "/v1/estimates/theme", 401),
            (hashlib.sha256(b"ingest-hashed-99").hexdigest(), "/v1/metrics", 401),
        ]:
            answer = s.request("GET", path, None, {"Authorization": f"Bearer {token}"})
            assert answer.status == status, (token, path)


@pytest.mark.parametrize(
    "entry", ["sha256:", "sha256:abc", "sha256:" + "g" * 64, "sha256:" + "a" * 65]
)
def test_malformed_hash_entries_are_config_errors(entry: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"tokens": {"admin": ["fine-token", entry]}}, environ={})
    message = str(info.value)
    assert "[tokens] admin: token 1" in message and "64 hex digits" in message
    assert entry not in message or entry == "sha256:"
    with pytest.raises(ConfigError, match="LDPKIT_INGEST_TOKENS: token 0"):
        config_from_dict({}, environ={"LDPKIT_INGEST_TOKENS": entry})


def test_hash_token_command(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("first-token\n\nsecond-token\n"))
    assert cli.main(["hash-token"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [token_hash("first-token"), token_hash("second-token")]
    assert cli.main(["hash-token", "--new"]) == 0
    lines = capsys.readouterr().out.splitlines()
    token = lines[0].removeprefix("token: ")
    assert lines[1] == f"hash:  {token_hash(token)}" and len(token) >= 40
    monkeypatch.setattr(sys, "stdin", io.StringIO("has space\n"))
    assert cli.main(["hash-token"]) == 2
    assert "has space" not in capsys.readouterr().err


def test_lookup_compares_every_digest_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = Tokens(
        ingest=tuple(f"ingest-{i}" for i in range(5)),
        read=(token_hash("read-0"),),
        admin=("admin-0", "admin-1"),
    )
    registry = TokenRegistry(tokens)
    assert "ingest-0" not in repr(registry) and "admin" not in repr(registry)
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented in ("ingest-0", "admin-1", "read-0", "nope", "x" * 1000, ""):
        calls.clear()
        registry.scopes(presented)
        # Every entry, each time, always two 32-byte digests: the work is the same
        # whichever token (if any) matches and however long the presented one is.
        assert calls == [(32, 32)] * 8, presented
    assert registry.scopes("read-0") == {"read"}
    assert registry.scopes("ingest-3") == {"ingest"}
    assert registry.scopes(token_hash("read-0")) == frozenset()


# --- tokens never logged ---------------------------------------------------------------
def _raw_http(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def test_tokens_never_appear_in_the_log(tmp_path: Path) -> None:
    """A collector at DEBUG with its access log answers every kind of request, good and
    bad (malformed HTTP quoting the Authorization line included): no token in the log."""
    hashed = "hashed-admin-token-5150"
    secrets_ = {INGEST, READ, hashed, WRONG, "env-ingest-token-31337"}
    config = tmp_path / "collector.toml"
    config.write_text(
        "[collector]\n"
        'database = "c.sqlite3"\n'
        # A refill far slower than the test: the third good batch (2 reports each) finds
        # the burst of 5 spent whatever the machine's speed (5/s refilled it on a slow run).
        "ingest_reports_per_second = 0.01\n"
        "ingest_burst = 5\n"
        "[tokens]\n"
        f'ingest = ["{INGEST}"]\n'
        f'read = ["{READ}"]\n'
        f'admin = ["{token_hash(hashed)}"]\n'
        "[metrics.theme]\n"
        'categories = ["a", "b", "c", "d"]\n'
        "epsilon = 1.0\n"
        'mechanism = "grr"\n'
    )
    env = {**os.environ, "LDPKIT_READ_TOKENS": f"{READ},env-ingest-token-31337"}
    proc = subprocess.Popen(
        [*CLI, "--log-level", "DEBUG", "serve", "--config", str(config), "--port", "0"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    log: list[str] = []
    started = threading.Event()
    port_box: list[int] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                port_box.append(int(m.group(1)))
                started.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert started.wait(30), "".join(log)
        port = port_box[0]
        url = f"http://127.0.0.1:{port}"
        kinds = {
            "none": {},
            "wrong": {"Authorization": f"Bearer {WRONG}"},
            "basic": {"Authorization": f"Basic {INGEST}"},
            "ingest": {"Authorization": f"Bearer {INGEST}"},
            "read": {"Authorization": f"Bearer {READ}"},
            "env": {"Authorization": "Bearer env-ingest-token-31337"},
            "admin": {"Authorization": f"Bearer {hashed}"},
        }
        good = batch(block_of("theme", grr_reports([1, 2])))
        bodies: list[tuple[str, str, bytes | None, str | None]] = [
            ("POST", "/v1/reports", good, wire.CONTENT_TYPE),
            ("POST", "/v1/reports", b"\xc1garbage", wire.CONTENT_TYPE),
            ("POST", "/v1/reports", good, "text/plain"),
            ("GET", "/v1/metrics", None, None),
            ("GET", "/v1/metrics/theme/versions", None, None),
            ("GET", "/v1/metrics/nope", None, None),
            ("PUT", "/v1/metrics/logged", b'{"categories": ["x", "y"], "epsilon": 1}', JSON_CT),
            ("PUT", "/v1/metrics/logged", b'{"epsilon": -1}', JSON_CT),
            ("GET", "/v1/estimates/theme?level=2", None, None),
            ("GET", "/v1/estimates/theme", None, None),
            ("DELETE", "/v1/metrics/logged", None, None),
            ("GET", "/nothing", None, None),
            ("GET", "/readyz", None, None),
        ]
        for _ in range(3):  # the third round's good batch runs into the rate limit
            for headers in kinds.values():
                for method, path, body, ctype in bodies:
                    h = dict(headers)
                    if ctype:
                        h["Content-Type"] = ctype
                    req = urllib.request.Request(url + path, body, h, method=method)
                    try:
                        with urllib.request.urlopen(req, timeout=10) as resp:
                            resp.read()
                    except urllib.error.HTTPError as exc:
                        assert exc.code < 500, (method, path, exc.read())
                        exc.read()
        # HTTP the server cannot parse, each quoting a token.
        start = "GET /v1/metrics HTTP/1.1\r\nAuthorization: Bearer "
        for raw in (
            f"{start}{INGEST}\x01\r\n\r\n",
            f"{start}{READ}\r\nContent-Length: x\r\n\r\n",
            f"{start}{hashed}\r\nX: {'a' * 9000}\r\n\r\n",
            f"BAD{WRONG} / HTTP/1.1\r\n\r\n",
            f"POST /v1/reports HTTP/1.1\r\nAuthorization: Bearer {INGEST}\r\n"
            "Transfer-Encoding: chunked\r\nContent-Type: application/msgpack\r\n\r\nzz\r\n",
        ):
            assert _raw_http(port, raw.encode("latin-1")).startswith(b"HTTP/1.")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    text = "".join(log)
    assert code == 0, text
    assert "rate_limited" not in text  # answers are not logged either; only access lines
    assert '"POST /v1/reports HTTP/1.1" 429' in text  # the rate limit was hit
    assert "Error handling request" in text and "request not logged" in text
    for secret in secrets_:
        assert secret not in text, secret


def test_config_errors_and_reprs_never_show_tokens() -> None:
    config = config_from_dict(
        {"tokens": {"ingest": ["visible-ingest-1"], "admin": [token_hash("zz-admin")]}},
        environ={"LDPKIT_READ_TOKENS": "visible-read-2"},
    )
    registry = TokenRegistry(config.tokens)
    for text in (repr(config), str(config), repr(config.tokens), repr(registry)):
        assert "visible-" not in text and "sha256:" not in text
    for bad in (["ok-token", "bad token-secret"], ["ok", "bad,secret"], ["\u00e9secret"]):
        with pytest.raises(ConfigError) as info:
            config_from_dict({"tokens": {"ingest": bad}}, environ={})
        assert "secret" not in str(info.value)


# --- rate limits -----------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limiter_token_bucket() -> None:
    clock = Clock()
    limiter = IngestLimiter(100.0, 200, clock=clock)
    a, b = b"a" * 32, b"b" * 32
    assert limiter.take(a, 150) is None  # 200 -> 50
    assert limiter.take(a, 100) == 1  # needs 100, has 50: 0.5 s, rounded up to 1
    assert limiter.take(b, 200) is None  # another token has its own bucket
    clock.now += 0.5
    assert limiter.take(a, 100) is None  # 50 + 50 -> 0
    assert limiter.blocked(a) == 1
    clock.now += 10
    assert limiter.blocked(a) is None
    assert limiter.take(a, 1000) is None  # more than the burst: let through when full
    assert limiter.blocked(a) == 9  # ... and the token is in debt: -800 + rate * 9 > 1
    clock.now += 7.99
    assert limiter.take(a, 0) == 1  # an empty batch costs one report: -1 needs 0.02 s
    assert not IngestLimiter(0.0, 10).enabled
    assert IngestLimiter(0.0, 10).take(a, 10**9) is None


def test_ingest_rate_limit_per_token(tmp_path: Path) -> None:
    other = "relay-token-0002"
    config = config_from_dict(
        {
            "collector": {
                "database": str(tmp_path / "c.sqlite3"),
                "ingest_reports_per_second": 100,
                "ingest_burst": 300,
            },
            "tokens": {"relay": [RELAY, other], "read": [READ]},
            "metrics": {"theme": METRICS["theme"]},
        },
        environ={},
    )
    clock = Clock()
    with ThreadedCollector(config) as s:
        limiter = s.collector.admission.limiter
        assert limiter.enabled and limiter.rate == 100.0 and limiter.burst == 300
        limiter._clock = clock

        def post(values: int, token: str = RELAY) -> Answer:
            body = batch(block_of("theme", grr_reports(np.arange(values) % 4)))
            headers = {"Authorization": f"Bearer {token}", "Content-Type": wire.CONTENT_TYPE}
            return s.request("POST", "/v1/reports", body, headers)

        def stored() -> int:
            return s.call(s.collector.store.report_count())

        assert post(250).status == 200  # 300 -> 50
        refused = post(100)
        assert refused.status == 429
        assert json.loads(refused.body)["error"] == "rate_limited"
        assert refused.headers["retry-after"] == "1"
        assert stored() == 250  # nothing of the refused batch
        assert post(200, other).status == 200  # the other token is not affected
        clock.now += 0.5
        assert post(100).status == 200  # 50 + 50 -> 0
        answer = post(1)
        assert answer.status == 429 and int(answer.headers["retry-after"]) >= 1
        # Other ingest answers are unaffected by the limit of a token in debt.
        bad = s.request(
            "POST",
            "/v1/reports",
            b"\xc1",
            {"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE},
        )
        assert bad.status == 429  # in debt: refused before the body is even read
        clock.now += 3
        assert post(300).status == 200
        assert stored() == 250 + 200 + 100 + 300
        metrics = s.request("GET", "/metrics").body.decode()
        assert 'ldpkit_batches_total{outcome="rate_limited"} 3.0' in metrics
        # Reading is never rate-limited.
        for _ in range(20):
            answer = s.request("GET", "/v1/estimates/theme", None, headers_for("read"))
            assert answer.status == 200


def test_rate_limit_config_keys() -> None:
    config = config_from_dict({}, environ={})
    assert config.ingest_reports_per_second == 0.0 and config.ingest_burst == 100_000
    for table, word in [
        ({"ingest_reports_per_second": -1}, "ingest_reports_per_second"),
        ({"ingest_reports_per_second": "fast"}, "ingest_reports_per_second"),
        ({"ingest_burst": 0}, "ingest_burst"),
    ]:
        with pytest.raises(ConfigError, match=word):
            config_from_dict({"collector": table}, environ={})
    assert (
        config_from_dict(
            {"collector": {"ingest_reports_per_second": 5}}, environ={}
        ).ingest_reports_per_second
        == 5.0
    )


def test_time_is_monotonic_default() -> None:
    assert IngestLimiter(1.0, 1)._clock is time.monotonic
