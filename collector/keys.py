"""Typed keys of the collector app's state."""

from __future__ import annotations

from aiohttp import web

from .auth import Scope, TokenRegistry
from .config import CollectorConfig
from .service import Collector
from .telemetry import Telemetry

CONFIG = web.AppKey("ldpkit_config", CollectorConfig)
COLLECTOR = web.AppKey("ldpkit_collector", Collector)
TELEMETRY = web.AppKey("ldpkit_telemetry", Telemetry)
TOKENS = web.AppKey("ldpkit_tokens", TokenRegistry)
GRANTED = web.RequestKey("ldpkit_granted", frozenset[Scope])
"""The kinds of the request's token (set by the auth middleware on routes that take one)."""
