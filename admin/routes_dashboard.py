"""The dashboard (counts, pipeline, models, disk) and its live fragments (the settings page is
admin/routes_settings.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin.rendering import render
from proxy.core.errors import ServiceUnavailable
from proxy.knowledge.service import Knowledge
from proxy.state import gateway_of, kb_name, knowledge


async def _current(request: Request) -> tuple[Knowledge | None, str | None]:
    """The base the page shows (its ``kb``), or why it cannot be read (an unknown base is a 404)."""
    try:
        return await knowledge(request), None
    except ServiceUnavailable as exc:
        gateway = request.app.state.gateway
        return None, gateway.knowledge_error if kb_name(request) == "default" else exc.message


async def _overview(request: Request) -> dict[str, Any]:
    kb, unavailable = await _current(request)
    if kb is None:
        return {"unavailable": unavailable}
    stats = await kb.documents.stats()  # documents counted as the documents page shows them
    cache = {kind: totals.count for kind, totals in (await kb.cache.kinds()).items() if totals.count}
    check = kb.embedding.check   # the store's embedding models against GRAPHGATE_EMBED_MODEL
    return {"unavailable": None, "stats": stats, "pipeline": kb.documents.status(), "cache": cache,
            "embedding": check, "embedding_problem": check.problem()}


async def dashboard(request: Request) -> Response:
    settings = gateway_of(request).settings
    return render(request, "dashboard.html", {**await _overview(request), "settings": settings})


async def pipeline_fragment(request: Request) -> Response:
    kb, _ = await _current(request)
    if kb is None:
        return render(request, "_pipeline.html", {"pipeline": None})
    return render(request, "_pipeline.html", {"pipeline": kb.documents.status()})


async def health_fragment(request: Request) -> Response:
    """Asked for by the dashboard after it has rendered: a slow upstream never slows the page. The
    upstream watcher's state, as /rag/health reports it (checked again when a few seconds old)."""
    watcher = request.app.state.gateway.watcher
    return render(request, "_health.html", {"state": await watcher.latest(), "upstreams": watcher.members()})


ROUTES = [
    Route("/", dashboard, methods=["GET"]),
    Route("/fragments/pipeline", pipeline_fragment, methods=["GET"]),
    Route("/fragments/health", health_fragment, methods=["GET"]),
]
