"""Fixtures for tests against a real PostgreSQL server.

The server is ``LDPKIT_TEST_POSTGRES`` (a libpq URL of a role that may create databases;
default ``postgresql://postgres@127.0.0.1:5432/postgres``). Each test session creates one
database ``ldpkit_test_<random>`` and drops it at the end; each test gets a fresh schema
in it (``pg_url``: the URL with ``options=-csearch_path=...``) or a fresh database of its
own (``fresh_pg_database``).

If the server cannot be reached the tests SKIP, saying how to enable them, unless
``LDPKIT_REQUIRE_POSTGRES=1`` (CI sets it): then they FAIL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

ADMIN_URL = os.environ.get("LDPKIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRED = os.environ.get("LDPKIT_REQUIRE_POSTGRES", "") == "1"


def with_database(url: str, dbname: str) -> str:
    """``url`` (a postgresql:// URL) naming database ``dbname`` instead."""
    return urlsplit(url)._replace(path=f"/{dbname}").geturl()


def with_schema(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL, once the server answers (else skip, or fail when required)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        message = f"psycopg is not installed ({exc}); pip install -e '.[dev]'"
        if REQUIRED:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        message = (
            f"PostgreSQL not reachable at {ADMIN_URL} ({str(exc).strip()}). To run these tests, "
            "start it (e.g. `pg_ctlcluster 15 main start`) or point LDPKIT_TEST_POSTGRES at a "
            "server where this role may CREATE DATABASE; LDPKIT_REQUIRE_POSTGRES=1 turns "
            "this skip into a failure"
        )
        if REQUIRED:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return ADMIN_URL


def _create_database(admin_url: str) -> str:
    import psycopg

    name = f"ldpkit_test_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database(pg_server: str) -> Iterator[str]:
    """A database for this test session (dropped at the end): its URL."""
    name = _create_database(pg_server)
    try:
        yield with_database(pg_server, name)
    finally:
        _drop_database(pg_server, name)


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A fresh, empty schema in the session's database: a URL whose search_path is it."""
    import psycopg

    schema = f"t_{secrets.token_hex(4)}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(pg_database, schema)
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def fresh_pg_database(pg_server: str) -> Iterator[str]:
    """A brand-new database for one test: its URL."""
    name = _create_database(pg_server)
    try:
        yield with_database(pg_server, name)
    finally:
        _drop_database(pg_server, name)
