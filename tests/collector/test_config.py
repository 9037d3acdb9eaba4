"""The collector's TOML config: what it accepts, and errors that name the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpkit.collector.config import (
    CollectorConfig,
    ConfigError,
    Tokens,
    config_from_dict,
    default_config,
    load_config,
)

GOOD = """
[collector]
host = "0.0.0.0"
port = 9000
database = "data/collector.sqlite3"
synchronous = "NORMAL"
max_body_bytes = 1048576
max_reports_per_batch = 5000
log_addresses = true

[tokens]
ingest = ["in-1", "in-2"]
read = ["rd-1"]
admin = ["ad-1"]

[metrics.theme]
categories = ["light", "dark"]
epsilon = 1.0
mechanism = "grr"

[metrics.latency]
kind = "numeric"
bounds = [0, 1000]
epsilon = 0.5
mechanism = "duchi"
bucket = "hour"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "collector.toml"
    path.write_text(text)
    return path


def test_loads_a_full_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD), environ={})
    assert (config.host, config.port) == ("0.0.0.0", 9000)
    assert config.database == str(tmp_path.resolve() / "data" / "collector.sqlite3")
    assert config.synchronous == "normal"
    assert (config.max_body_bytes, config.max_reports_per_batch) == (1048576, 5000)
    assert config.log_addresses is True
    assert config.tokens == Tokens(("in-1", "in-2"), ("rd-1",), ("ad-1",))
    assert set(config.metrics) == {"theme", "latency"}
    assert config.metrics["latency"].bucket.value == "hour"
    assert config.metrics["theme"].resolved_mechanism == "grr"


def test_defaults() -> None:
    config = default_config(environ={})
    assert config == CollectorConfig(source="<defaults>")
    assert config.synchronous == "full" and config.log_addresses is False
    assert config.tokens == Tokens()


def test_environment_tokens_replace_the_file(tmp_path: Path) -> None:
    env = {"LDPKIT_INGEST_TOKENS": " env-a, env-b ,", "LDPKIT_ADMIN_TOKENS": ""}
    config = load_config(write(tmp_path, GOOD), environ=env)
    assert config.tokens.ingest == ("env-a", "env-b")
    assert config.tokens.read == ("rd-1",)
    assert config.tokens.admin == ("ad-1",)  # empty variable: the file's list stays


def test_tokens_are_never_printed(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD), environ={})
    assert "in-1" not in repr(config) and "ad-1" not in repr(config.tokens)
    with pytest.raises(ConfigError) as info:
        config_from_dict({"tokens": {"read": ["has space-secret"]}}, environ={})
    assert "secret" not in str(info.value) and "[tokens] read" in str(info.value)
    with pytest.raises(ConfigError, match="LDPKIT_READ_TOKENS: token 1"):
        config_from_dict({}, environ={"LDPKIT_READ_TOKENS": "ok,bad\ttoken"})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[collector]\nport = 'eighty'", ["[collector] port", "0..65535", "eighty"]),
        ("[collector]\nport = 70000", ["[collector] port"]),
        ("[collector]\nprot = 1", ["unknown key", "prot"]),
        ("[collector]\nsynchronous = 'off'", ["[collector] synchronous", "full"]),
        ("[collector]\nlog_addresses = 'yes'", ["[collector] log_addresses", "true or false"]),
        ("[collector]\ndatabase = ':memory:'", ["[collector] database", "memory"]),
        ("[collector]\nmax_body_bytes = 10", ["[collector] max_body_bytes"]),
        ("[colector]\nport = 1", ["unknown table", "colector"]),
        ("[tokens]\nwrite = ['x']", ["[tokens]", "write"]),
        ("[tokens]\nread = 5", ["[tokens] read", "list"]),
        ("[metrics.theme]\ncategories = ['a', 'b']", ["[metrics.theme]", "epsilon"]),
        ("[metrics.theme]\ncategories = ['a']\nepsilon = 1.0", ["[metrics.theme]", "categories"]),
        ("[metrics.Theme]\ncategories = ['a', 'b']\nepsilon = 1.0", ["[metrics.Theme]", "name"]),
        (
            "[metrics.t]\ncategories = ['a', 'b']\nepsilon = 1.0\nsize = 3",
            ["[metrics.t]", "unknown keys size"],
        ),
        ("[metrics]\nt = 3", ["[metrics.t]", "table"]),
        ("[collector\nport = 1", ["invalid TOML"]),
    ],
)
def test_errors_name_the_file_and_key(tmp_path: Path, text: str, words: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, (word, message)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.toml")


def test_overrides_are_checked() -> None:
    config = default_config(environ={})
    changed = config.with_overrides(port=0, database="x.db", host=None)
    assert (changed.port, changed.database, changed.host) == (0, "x.db", config.host)
    with pytest.raises(ConfigError, match="port"):
        config.with_overrides(port=-1)
    postgres = config.with_overrides(database="postgresql://u@h/db")
    assert postgres.database == "postgresql://u@h/db"


def test_postgres_url_pool_and_retention_keys() -> None:
    url = "postgresql://ldpkit@db.internal:5432/ldpkit?sslmode=require"
    config = config_from_dict(
        {
            "collector": {
                "database": url,
                "pool_size": 12,
                "report_id_retention_days": 45,
                "catalog_refresh_seconds": 2,
            }
        },
        environ={},
    )
    assert config.database == url  # a URL is kept as given, not made a path
    assert (config.pool_size, config.report_id_retention_days) == (12, 45)
    assert config.catalog_refresh_seconds == 2.0
    defaults = default_config(environ={})
    assert (defaults.pool_size, defaults.report_id_retention_days) == (8, 30)
    for key, bad in [
        ("pool_size", 1),
        ("report_id_retention_days", 0),
        ("catalog_refresh_seconds", 0),
    ]:
        with pytest.raises(ConfigError, match=f"\\[collector\\] {key} must be"):
            config_from_dict({"collector": {key: bad}}, source="x.toml", environ={})


def test_relay_tokens_and_the_public_token_keys(tmp_path: Path) -> None:
    text = GOOD.replace("[tokens]", '[tokens]\nrelay = ["rl-1"]')
    config = load_config(write(tmp_path, text), environ={"LDPKIT_RELAY_TOKENS": "env-r"})
    assert config.tokens.relay == ("env-r",) and config.tokens.ingest == ("in-1", "in-2")
    assert "relay=1" in repr(config.tokens) and "env-r" not in repr(config.tokens)
    defaults = default_config(environ={})
    assert (defaults.device_batches_per_minute, defaults.device_burst) == (60.0, 120)
    assert defaults.screen_false_alarm == 1e-4 and defaults.screen_relay is True
    assert defaults.source_header == "" and "127.0.0.1/32" in defaults.trusted_proxies
    good = {
        "source_header": "X-Real-IP",
        "trusted_proxies": ["10.0.0.0/8"],
        "screen_false_alarm": 0,
    }
    config = config_from_dict({"collector": good}, environ={})
    assert (config.source_header, config.trusted_proxies) == ("X-Real-IP", ("10.0.0.0/8",))
    for key, bad in (
        ("source_header", "X Forwarded"),
        ("trusted_proxies", ["not-a-network"]),
        ("screen_false_alarm", 0.5),
        ("screen_window_seconds", -1),
        ("device_batches_per_minute", "fast"),
    ):
        with pytest.raises(ConfigError, match=key):
            config_from_dict({"collector": {key: bad}}, environ={})
