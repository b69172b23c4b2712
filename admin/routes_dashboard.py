"""The dashboard (counts, pipeline, models, disk), its live fragments, and the settings page."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin.rendering import render


async def _overview(request: Request) -> dict[str, Any]:
    gateway = request.app.state.gateway
    kb = gateway.knowledge
    if kb is None:
        return {"unavailable": gateway.knowledge_error}
    stats = await kb.documents.stats()  # documents counted as the documents page shows them
    cache = {kind: totals.count for kind, totals in (await kb.cache.kinds()).items() if totals.count}
    return {"unavailable": None, "stats": stats, "pipeline": kb.documents.status(), "cache": cache,
            "embedding": await kb.documents.embedding()}


async def dashboard(request: Request) -> Response:
    settings = request.app.state.gateway.settings
    return render(request, "dashboard.html", {**await _overview(request), "settings": settings})


async def pipeline_fragment(request: Request) -> Response:
    kb = request.app.state.gateway.knowledge
    if kb is None:
        return render(request, "_pipeline.html", {"pipeline": None})
    return render(request, "_pipeline.html", {"pipeline": kb.documents.status()})


async def health_fragment(request: Request) -> Response:
    """Asked for by the dashboard after it has rendered: a slow upstream never slows the page. The
    upstream watcher's state, as /rag/health reports it (checked again when a few seconds old)."""
    return render(request, "_health.html", {"state": await request.app.state.gateway.watcher.latest()})


async def settings_page(request: Request) -> Response:
    settings = request.app.state.gateway.settings
    rows = await anyio.to_thread.run_sync(settings.describe)
    return render(request, "settings.html", {"rows": rows})


ROUTES = [
    Route("/", dashboard, methods=["GET"]),
    Route("/fragments/pipeline", pipeline_fragment, methods=["GET"]),
    Route("/fragments/health", health_fragment, methods=["GET"]),
    Route("/settings", settings_page, methods=["GET"]),
]
