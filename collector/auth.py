"""Bearer tokens: four kinds, compared in constant time, never logged.

``Authorization: Bearer <token>``. A missing or unknown token answers 401; a valid token
of a kind the route does not take answers 403. Each route declares the kinds it takes
with :func:`requires`; the auth middleware reads that off the matched handler.

The config may list a token as itself or as ``sha256:<64 hex digits>`` (its SHA-256,
see :func:`token_hash` and ``ldpkit hash-token``). Either way the registry keeps only
digests: a presented token is hashed once and compared with every configured digest.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, TypeVar

from .config import HASH_PREFIX, Tokens

SCOPES_ATTRIBUTE = "ldpkit_scopes"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class Scope(StrEnum):
    INGEST = "ingest"  # a device's reports (the tokens apps ship): capped, rate-limited by source
    READ = "read"
    ADMIN = "admin"
    RELAY = "relay"  # many devices' reports (server-side batching, simulate, load tests)


def token_role(granted: frozenset[Scope]) -> str:
    """What a token is, as the collector tells it (``LDPKIT-Token-Role``): ``relay`` or
    ``device`` for tokens that post reports (relay first: it may carry many devices'),
    else ``admin`` or ``read``."""
    for scope, role in ((Scope.RELAY, "relay"), (Scope.INGEST, "device"), (Scope.ADMIN, "admin")):
        if scope in granted:
            return role
    return "read"


def requires(*scopes: Scope) -> Callable[[F], F]:
    """Mark a handler as taking tokens of any of ``scopes``."""

    def mark(handler: F) -> F:
        setattr(handler, SCOPES_ATTRIBUTE, frozenset(scopes))
        return handler

    return mark


def required_scopes(handler: object) -> frozenset[Scope] | None:
    """The scopes a handler takes, or None if it is public."""
    scopes = getattr(handler, SCOPES_ATTRIBUTE, None)
    return scopes if isinstance(scopes, frozenset) else None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, value = (header or "").strip().partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def digest(token: str) -> bytes:
    """The SHA-256 of a token's UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def token_id(authorization: str | None) -> bytes:
    """The digest of the bearer token of an ``Authorization`` header (which the auth
    middleware accepted): what per-token state such as rate limits is keyed by."""
    return digest(bearer_token(authorization) or "")


def token_hash(token: str) -> str:
    """The ``sha256:<hex>`` form of a token, to list in the config instead of the token."""
    return HASH_PREFIX + digest(token).hex()


def configured_digest(entry: str) -> bytes:
    """The digest a config entry stands for: the hex of a ``sha256:`` entry (the config
    checked it is 64 hex digits), else the SHA-256 of the token itself."""
    if entry.startswith(HASH_PREFIX):
        return bytes.fromhex(entry[len(HASH_PREFIX) :])
    return digest(entry)


class TokenRegistry:
    """Which kinds a presented token has. Only digests are kept; the presented token's
    digest is compared (with :func:`hmac.compare_digest`) with every configured one on
    every lookup, so timing does not say which, if any, matched."""

    def __init__(self, tokens: Tokens) -> None:
        self._entries: list[tuple[bytes, Scope]] = [
            (configured_digest(token), Scope(kind))
            for kind, values in tokens.by_kind().items()
            for token in values
        ]

    def __repr__(self) -> str:
        return f"TokenRegistry({len(self._entries)} tokens)"

    def scopes(self, presented: str) -> frozenset[Scope]:
        """The kinds of ``presented`` (empty if unknown)."""
        given = digest(presented)
        return frozenset(s for token, s in self._entries if hmac.compare_digest(token, given))
