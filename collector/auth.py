"""Bearer tokens: three kinds, compared in constant time, never logged.

``Authorization: Bearer <token>``. A missing or unknown token answers 401; a valid token
of a kind the route does not take answers 403. Each route declares the kinds it takes
with :func:`requires`; the auth middleware reads that off the matched handler.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, TypeVar

from .config import Tokens

SCOPES_ATTRIBUTE = "ldpkit_scopes"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class Scope(StrEnum):
    INGEST = "ingest"
    READ = "read"
    ADMIN = "admin"


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
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


class TokenRegistry:
    """Which kinds a presented token has. Every configured token is compared (with
    :func:`hmac.compare_digest`) on every lookup, so timing does not say which matched."""

    def __init__(self, tokens: Tokens) -> None:
        self._entries: list[tuple[bytes, Scope]] = [
            (token.encode(), Scope(kind))
            for kind, values in tokens.by_kind().items()
            for token in values
        ]

    def __repr__(self) -> str:
        return f"TokenRegistry({len(self._entries)} tokens)"

    def scopes(self, presented: str) -> frozenset[Scope]:
        given = presented.encode("utf-8", "replace")
        found: set[Scope] = set()
        for token, scope in self._entries:
            if hmac.compare_digest(token, given):
                found.add(scope)
        return frozenset(found)
