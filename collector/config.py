"""Collector configuration: one TOML file, tokens optionally from the environment.

The keys, their defaults and what each does: docs/deployment.md (its annotated file is
this module's schema: every ``[collector]`` key is a field of :class:`CollectorConfig`).

Every error names the file and the key that is wrong, and never repeats a token.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError as ConfigError  # its home is ldpkit.errors
from ..errors import LdpkitError, ParameterError
from ..metrics import MetricDefinition, check_definition_size
from ..screening import DEFAULT_FALSE_ALARM

DEFAULT_PORT = 8787
TOKEN_KINDS = ("ingest", "read", "admin", "relay")
TOKEN_ENV = {kind: f"LDPKIT_{kind.upper()}_TOKENS" for kind in TOKEN_KINDS}
POSTGRES_PREFIXES = ("postgresql://", "postgres://")
HASH_PREFIX = "sha256:"  # a token given as its SHA-256 (see ldpkit.collector.auth)
T = TypeVar("T")


class Synchronous(StrEnum):
    """SQLite's durability setting (``PRAGMA synchronous``; see docs/deployment.md)."""

    FULL = "full"
    EXTRA = "extra"
    NORMAL = "normal"


@dataclass(frozen=True)
class Tokens:
    """Bearer tokens by kind: ``ingest`` posts one device's reports (the tokens apps ship),
    ``relay`` posts many devices' reports (server-side batching, ``simulate``, load tests),
    ``read`` reads estimates, ``admin`` defines metrics (and reads everything)."""

    ingest: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    admin: tuple[str, ...] = ()
    relay: tuple[str, ...] = ()

    def by_kind(self) -> dict[str, tuple[str, ...]]:
        return {kind: getattr(self, kind) for kind in TOKEN_KINDS}

    def __repr__(self) -> str:  # never print a token
        counts = ", ".join(f"{k}={len(v)}" for k, v in self.by_kind().items())
        return f"Tokens({counts})"


def _int_in(lo: int, hi: int) -> Any:
    def check(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

    check.__doc__ = f"an integer in {lo}..{hi}"
    return check


def _is_str(v: object) -> bool:
    """a non-empty string"""
    return isinstance(v, str) and bool(v.strip())


def _is_bool(v: object) -> bool:
    """true or false"""
    return isinstance(v, bool)


def _is_seconds(v: object) -> bool:
    """a number of seconds >= 0"""
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(float(v))
        and float(v) >= 0
    )


def _is_positive_seconds(v: object) -> bool:
    """a number of seconds > 0"""
    return _is_seconds(v) and isinstance(v, int | float) and v > 0


def _is_rate(v: object) -> bool:
    """a number >= 0 (0: no limit)"""
    return _is_seconds(v)


_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


def _is_origins(v: object) -> bool:
    """a list of origins such as "https://app.example" (scheme and host, no path), or "*" """
    return isinstance(v, list | tuple) and all(
        isinstance(o, str) and (o == "*" or bool(_ORIGIN.fullmatch(o))) for o in v
    )


def _is_false_alarm(v: object) -> bool:
    """a probability in 0..0.1 (0: no screening)"""
    return _is_seconds(v) and isinstance(v, int | float) and v <= 0.1


def _is_header(v: object) -> bool:
    """a header name such as "X-Forwarded-For", or "" (the peer address)"""
    return isinstance(v, str) and (v == "" or bool(re.fullmatch(r"[A-Za-z0-9-]+", v)))


def _is_networks(v: object) -> bool:
    """a list of networks such as "10.0.0.0/8" or "::1/128" """
    try:
        return isinstance(v, list | tuple) and all(
            isinstance(n, str) and ipaddress.ip_network(n, strict=False) is not None for n in v
        )
    except ValueError:
        return False


def _is_sync(v: object) -> bool:
    return isinstance(v, str) and v.lower() in tuple(Synchronous)


_is_sync.__doc__ = "one of " + ", ".join(f'"{m}"' for m in Synchronous)


def _key(default: T, check: Callable[[object], bool]) -> T:
    """A [collector] key: its default and its check, whose docstring says what it wants."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True)
class CollectorConfig:
    """Everything ``create_app`` needs. Build it with :func:`load_config` or directly."""

    host: str = _key("127.0.0.1", _is_str)
    port: int = _key(DEFAULT_PORT, _int_in(0, 65535))
    database: str = _key("ldpkit.sqlite3", _is_str)
    synchronous: Synchronous = _key(Synchronous.FULL, _is_sync)  # noqa: RUF009 - an enum member
    sqlite_cache_mib: int = _key(256, _int_in(1, 65536))
    pool_size: int = _key(8, _int_in(2, 1000))
    report_id_retention_days: int = _key(30, _int_in(1, 3650))
    accept_v1: bool = _key(True, _is_bool)
    compact_seconds: float = _key(1.0, _is_positive_seconds)
    catalog_refresh_seconds: float = _key(10.0, _is_positive_seconds)
    max_body_bytes: int = _key(16 * 2**20, _int_in(1024, 2**31))
    max_definition_bytes: int = _key(2 * 2**20, _int_in(1024, 2**30))
    max_reports_per_batch: int = _key(100_000, _int_in(1, 10_000_000))
    max_blocks_per_batch: int = _key(1000, _int_in(1, 100_000))
    max_pending_batches: int = _key(256, _int_in(1, 1_000_000))
    max_pending_reports: int = _key(2_000_000, _int_in(1, 10**9))
    max_pending_bytes: int = _key(256 * 2**20, _int_in(1024, 2**40))
    header_timeout: float = _key(30.0, _is_positive_seconds)
    upload_grace: float = _key(10.0, _is_seconds)
    min_upload_rate: int = _key(4096, _int_in(1, 2**40))
    max_estimate_items: int = _key(250_000, _int_in(1, 10**9))
    max_answer_cpu_seconds: float = _key(5.0, _is_positive_seconds)
    estimate_interval_seconds: float = _key(30.0, _is_seconds)
    estimate_deadline_seconds: float = _key(5.0, _is_seconds)
    estimate_workers: int = _key(1, _int_in(1, 256))
    estimate_cpu_seconds: float = _key(30.0, _is_positive_seconds)
    estimate_memory_mib: int = _key(1024, _int_in(64, 2**20))
    estimate_cache_mib: int = _key(256, _int_in(1, 2**20))
    retry_after: int = _key(1, _int_in(1, 3600))
    ingest_reports_per_second: float = _key(0.0, _is_rate)
    ingest_burst: int = _key(100_000, _int_in(1, 10**9))
    device_batches_per_minute: float = _key(60.0, _is_rate)
    device_burst: int = _key(120, _int_in(1, 10**9))
    source_header: str = _key("", _is_header)
    trusted_proxies: tuple[str, ...] = _key(("127.0.0.1/32", "::1/128"), _is_networks)
    screen_false_alarm: float = _key(DEFAULT_FALSE_ALARM, _is_false_alarm)
    screen_relay: bool = _key(True, _is_bool)
    screen_window_seconds: float = _key(3600.0, _is_seconds)
    screen_senders: int = _key(10_000, _int_in(1, 10**7))
    screen_memory_mib: int = _key(64, _int_in(1, 65536))
    log_addresses: bool = _key(False, _is_bool)
    cors_origins: tuple[str, ...] = _key((), _is_origins)
    """Origins (``https://app.example``, or ``"*"``) whose pages may call the ingest
    routes (``POST /v1/reports``, ``GET /v1/metrics...``) from a browser: CORS headers
    and preflight answers for them; empty (the default) answers no CORS at all."""
    shutdown_timeout: float = _key(30.0, _is_seconds)
    tokens: Tokens = field(default_factory=Tokens)
    metrics: Mapping[str, MetricDefinition] = field(default_factory=dict)
    source: str = "<defaults>"

    def with_overrides(self, **changes: Any) -> CollectorConfig:
        """A copy with some fields replaced (``None`` values are ignored); the new values
        are checked (the others were)."""
        kept = {k: v for k, v in changes.items() if v is not None}
        if not kept:
            return self
        return replace(self, **_check_collector(kept, self.source, base_dir=None))


_COLLECTOR_KEYS = {f.name: f.metadata["check"] for f in fields(CollectorConfig) if f.metadata}
_FLOATS = {f.name for f in fields(CollectorConfig) if f.type == "float"}


def _check_collector(
    table: Mapping[str, Any], source: str, base_dir: Path | None
) -> dict[str, Any]:
    if unknown := sorted(set(table) - set(_COLLECTOR_KEYS)):
        raise ConfigError(
            f"{source}: unknown key(s) in [collector]: {', '.join(unknown)} "
            f"(known: {', '.join(_COLLECTOR_KEYS)})"
        )
    out: dict[str, Any] = {}
    for key, value in table.items():
        check = _COLLECTOR_KEYS[key]
        if not check(value):
            raise ConfigError(f"{source}: [collector] {key} must be {check.__doc__}, got {value!r}")
        out[key] = float(value) if key in _FLOATS else value
    if "synchronous" in out:
        out["synchronous"] = Synchronous(out["synchronous"].lower())
    for key in ("cors_origins", "trusted_proxies"):
        if key in out:
            out[key] = tuple(out[key])
    if "database" in out:
        out["database"] = _database_path(out["database"], source, base_dir)
    return out


def _database_path(value: str, source: str, base_dir: Path | None) -> str:
    if value.startswith(POSTGRES_PREFIXES):
        return value
    if value == ":memory:" or value.startswith("file:"):
        raise ConfigError(
            f"{source}: [collector] database must be a file path or a postgresql:// URL, "
            f"got {value!r} (an in-memory database would lose every acknowledged report)"
        )
    path = Path(value).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    return str(path)


def _check_token(token: object, where: str, index: int) -> str:
    # Never echo the token itself: only where it is and what is wrong.
    if not isinstance(token, str):
        raise ConfigError(f"{where}: token {index} must be a string, got {type(token).__name__}")
    if not token or any(not (0x21 <= ord(c) <= 0x7E) or c == "," for c in token):
        raise ConfigError(
            f"{where}: token {index} must be non-empty printable ASCII without spaces or commas"
        )
    if token.startswith(HASH_PREFIX):
        digits = token[len(HASH_PREFIX) :]
        if len(digits) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise ConfigError(
                f"{where}: token {index} starts with {HASH_PREFIX!r} but is not followed by "
                "64 hex digits (the SHA-256 of a token: ldpkit hash-token)"
            )
    return token


def _tokens(table: object, source: str, environ: Mapping[str, str]) -> Tokens:
    table = {} if table is None else table
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [tokens] must be a table")
    if unknown := sorted(set(table) - set(TOKEN_KINDS)):
        raise ConfigError(
            f"{source}: unknown key(s) in [tokens]: {', '.join(unknown)} "
            f"(known: {', '.join(TOKEN_KINDS)})"
        )
    return Tokens(**{kind: _kind_tokens(kind, table, source, environ) for kind in TOKEN_KINDS})


def _kind_tokens(
    kind: str, table: dict[str, object], source: str, environ: Mapping[str, str]
) -> tuple[str, ...]:
    """The tokens of ``kind``: its environment variable's when set, else the table's."""
    env_name = TOKEN_ENV[kind]
    env_value = environ.get(env_name, "").strip()
    if env_value:
        items = [t.strip() for t in env_value.split(",") if t.strip()]
        where = f"environment variable {env_name}"
        return tuple(_check_token(t, where, i) for i, t in enumerate(items))
    raw = table.get(kind, [])
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ConfigError(f"{source}: [tokens] {kind} must be a list of strings")
    return tuple(_check_token(t, f"{source}: [tokens] {kind}", i) for i, t in enumerate(raw))


def check_cost(definition: MetricDefinition, cpu_seconds: float, memory_mib: int) -> None:
    """Raise ParameterError if preparing ``definition``'s estimate may cost more than the
    estimate worker's budget (``estimate_cpu_seconds``, ``estimate_memory_mib``), by the
    kind's measured worst case (docs/deployment.md, "Sizing the estimate worker"); the
    message names the budget (or both) it is over."""
    cost = definition.kind_spec.cost(definition)
    mib = cost.memory_bytes / 2**20
    over = []
    if cost.cpu_seconds > cpu_seconds:
        over.append(f"CPU budget of {cpu_seconds:g} s (estimate_cpu_seconds)")
    if mib > memory_mib:
        over.append(f"memory budget of {memory_mib:,} MiB (estimate_memory_mib)")
    if over:
        raise ParameterError(
            f"metric {definition.name}: {cost.what} takes up to {cost.cpu_seconds:.0f} CPU "
            f"seconds and {mib:,.0f} MiB (measured, docs/deployment.md), over this "
            f"collector's {' and its '.join(over)}: ask less of it, or raise the budget"
        )


def _metrics(table: object, source: str, budget: tuple[float, int]) -> dict[str, MetricDefinition]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [metrics] must hold one table per metric ([metrics.NAME])")
    out: dict[str, MetricDefinition] = {}
    for name, spec in table.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{source}: [metrics.{name}] must be a table")
        try:
            out[name] = check_definition_size(MetricDefinition.from_dict(name, spec))
            check_cost(out[name], *budget)
        except (LdpkitError, ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: [metrics.{name}] {exc}") from None
    return out


def config_from_dict(
    data: Mapping[str, Any],
    *,
    source: str = "<config>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectorConfig:
    """A config from parsed TOML (or any mapping of the same shape)."""
    environ = os.environ if environ is None else environ
    if unknown := sorted(set(data) - {"collector", "tokens", "metrics"}):
        raise ConfigError(
            f"{source}: unknown table(s) {', '.join(unknown)} (known: collector, tokens, metrics)"
        )
    collector = data.get("collector", {})
    if not isinstance(collector, dict):
        raise ConfigError(f"{source}: [collector] must be a table")
    values = _check_collector(collector, source, base_dir)
    budget = (
        values.get("estimate_cpu_seconds", CollectorConfig.estimate_cpu_seconds),
        values.get("estimate_memory_mib", CollectorConfig.estimate_memory_mib),
    )
    return CollectorConfig(
        **values,
        tokens=_tokens(data.get("tokens"), source, environ),
        metrics=_metrics(data.get("metrics"), source, budget),
        source=source,
    )


def load_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> CollectorConfig:
    """Read and check a TOML config file; :class:`ConfigError` names what is wrong."""
    p = Path(path).expanduser()
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return config_from_dict(data, source=str(p), base_dir=p.resolve().parent, environ=environ)


def default_config(*, environ: Mapping[str, str] | None = None) -> CollectorConfig:
    """Defaults, with tokens from the environment (for ``ldpkit serve`` without --config)."""
    return config_from_dict({}, source="<defaults>", environ=environ)
