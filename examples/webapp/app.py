"""An aiohttp web app that embeds ldpkit's AsyncReporter.

The app has a settings endpoint; each time a user picks a theme, the app reports it
with local differential privacy. The reporter is opened and closed with the app
(cleanup_ctx), flushes in the background, and keeps its outbox on disk, so reports
survive a restart or the collector being away. The reporter holds its state_dir while open
(exclusive_state, the default): run several worker processes with a state_dir each, or
pass exclusive_state=False to every one of them to share one.

Run:  LDPKIT_COLLECTOR=http://127.0.0.1:8787 LDPKIT_INGEST_TOKEN=app-secret \\
      .venv/bin/python examples/webapp/app.py
Then: curl -X POST localhost:8080/settings -d '{"theme": "dark"}'
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from ldpkit.client import AsyncReporter, BudgetExceeded, ParameterError

REPORTER = web.AppKey("reporter", AsyncReporter)


def create_app(collector_url: str, token: str, state_dir: str | Path) -> web.Application:
    async def reporter_context(app: web.Application) -> AsyncIterator[None]:
        async with AsyncReporter(collector_url, token=token, state_dir=state_dir) as reporter:
            app[REPORTER] = reporter
            yield  # on shutdown the reporter flushes what it can and closes

    async def save_settings(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:  # not JSON: the client's mistake, not a server error
            return web.json_response({"error": 'send JSON such as {"theme": "dark"}'}, status=400)
        if not isinstance(body, dict):
            return web.json_response(
                {"error": 'send a JSON object such as {"theme": "dark"}'}, status=400
            )
        theme = body.get("theme")
        # ... store the user's setting in the app's own database here ...
        try:
            receipt = await request.app[REPORTER].report("theme", theme)
        except ParameterError as exc:  # not a known theme: the user's input was wrong
            return web.json_response({"error": str(exc)}, status=400)
        except BudgetExceeded:  # this device has reported enough today: fine, skip
            return web.json_response({"saved": True, "reported": False})
        return web.json_response({"saved": True, "reported": receipt.queued})

    app = web.Application()
    app.cleanup_ctx.append(reporter_context)
    app.router.add_post("/settings", save_settings)
    return app


if __name__ == "__main__":
    web.run_app(
        create_app(
            os.environ.get("LDPKIT_COLLECTOR", "http://127.0.0.1:8787"),
            os.environ.get("LDPKIT_INGEST_TOKEN", "app-secret"),
            os.environ.get("LDPKIT_STATE_DIR", "~/.ldpkit-webapp"),
        ),
        # Loopback unless told otherwise: an example should not listen on every interface.
        host=os.environ.get("HOST", "127.0.0.1"),
        port=int(os.environ.get("PORT", "8080")),
    )
