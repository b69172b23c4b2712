"""The settings page: every setting of the table, its value (never a secret's) and where it came from
(proxy/core/settings_rows.py), in a table whose long values wrap."""

from __future__ import annotations

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin.rendering import render
from proxy.core.settings_rows import settings_rows
from proxy.state import gateway_of


async def settings_page(request: Request) -> Response:
    settings = gateway_of(request).settings
    rows = await anyio.to_thread.run_sync(settings_rows, settings)
    return render(request, "settings.html", {"rows": rows})


ROUTES = [Route("/settings", settings_page, methods=["GET"])]
