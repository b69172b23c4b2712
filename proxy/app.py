"""The application factory. Resources are built in the lifespan, never at import time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from admin.console import build_console, error_page
from admin.console import mount as admin_mount
from proxy.control.keys import KeyStore
from proxy.control.lists import KBS, KEYS, MODELS, SESSIONS, Holder, following
from proxy.control.models import KnowledgeModels
from proxy.core.data_dir import hidden_in
from proxy.core.errors import GraphGateError, StoreUnavailable
from proxy.core.limiter import PriorityLimiter
from proxy.core.responses import error_response
from proxy.core.setting_parsers import url_list
from proxy.core.settings import Settings
from proxy.gateway import routes_ollama, routes_openai
from proxy.gateway.augment import Augmenter
from proxy.gateway.chat import ChatPipeline
from proxy.gateway.grounding import ground_turn
from proxy.guards.body_limit import BodyLimitMiddleware
from proxy.guards.metrics_gate import metrics_refusal
from proxy.guards.middleware import build_middleware
from proxy.knowledge.bases import KnowledgeBases
from proxy.knowledge.service import Knowledge, run_knowledge
from proxy.mcp_server.http import McpEndpoint
from proxy.monitoring import route as metrics_route
from proxy.monitoring.metrics import Metrics
from proxy.rag_api import (
    routes_documents,
    routes_graph,
    routes_health,
    routes_kbs,
    routes_keys,
    routes_models,
    routes_query,
)
from proxy.state import Gateway, ReleaseLeases
from proxy.store.lists_open import open_lists, open_pending
from proxy.upstream.pool import Upstreams, connect
from proxy.upstream.pool_watch import UpstreamsWatcher
from proxy.upstream.watch import WATCH_SECONDS, UpstreamWatcher, safe_url

__all__ = ["Settings", "create_app"]

log = logging.getLogger("graphgate")

# Ollama's own texts for routing errors, as its clients show them
_ROUTING_MESSAGES = {404: "404 page not found", 405: "405 method not allowed"}


def _render_error(request: Request, status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    if request.url.path.startswith("/admin"):
        return error_page(request, status, message)
    return error_response(request.url.path, status, message, headers=headers)


async def on_graphgate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GraphGateError)
    message = exc.message
    if exc.status >= 500:
        log.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status, message)
        gateway = getattr(request.app.state, "gateway", None)
        if gateway is not None:   # a server error's reason may name files: never where they are
            message = hidden_in(message, gateway.settings.data_dir)
    return _render_error(request, exc.status, message)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = _ROUTING_MESSAGES.get(exc.status_code, str(exc.detail))
    return _render_error(request, exc.status_code, message, headers=exc.headers)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error in %s %s", request.method, request.url.path)
    return _render_error(request, 500, f"internal error: {type(exc).__name__}")


def open_services(gateway: Gateway) -> list[tuple[str, Knowledge | None]]:
    """The open knowledge bases' services by name, default first (what the metrics' gauges read)."""
    if gateway.bases is not None:
        return gateway.bases.open_services()
    return [("default", gateway.knowledge)]


def create_app(settings: Settings | None = None, *,
               upstream_transport: httpx.AsyncBaseTransport | None = None,
               upstream_transports: Mapping[str, httpx.AsyncBaseTransport] | None = None,
               watch_seconds: float | None = None) -> Starlette:
    """``watch_seconds``: how often the upstream is checked in the background (WATCH_SECONDS by
    default; 0: never, health requests then check on demand). With an injected transport (an
    in-process upstream: the tests) the default is never, so that the upstream's request log holds
    only what a test sent. ``upstream_transports``: an in-process transport per upstream URL
    (several upstreams in GRAPHGATE_UPSTREAM)."""
    settings = settings or Settings.load()
    if watch_seconds is None:
        watch_seconds = 0 if upstream_transport is not None or upstream_transports else WATCH_SECONDS
    mcp = McpEndpoint(settings)  # /mcp: its server is built and run in the lifespan

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        def chosen() -> str | None:
            return gateway.knowledge.models.chosen_chat_model if gateway.knowledge else None

        upstream = connect(settings, transport=upstream_transport, transports=upstream_transports)
        watcher = (UpstreamsWatcher(upstream, settings, interval=watch_seconds or WATCH_SECONDS, chosen_model=chosen)
                   if isinstance(upstream, Upstreams) else
                   UpstreamWatcher(upstream, settings, interval=watch_seconds or WATCH_SECONDS, chosen_model=chosen))
        console = build_console(settings, open_pending(settings))
        gateway = Gateway(settings=settings, upstream=upstream, chat=ChatPipeline(), console=console,
                          watcher=watcher, metrics=Metrics(lambda: open_services(gateway), upstreams=watcher.members,
                                          upstream_urls=[safe_url(url) for url in url_list(settings.upstream)]))
        gateway.store_probe = anyio.CapacityLimiter(1)
        # the lists of bases, keys and knowledge models: files, or rows every replica shares (PostgreSQL)
        lists = open_lists(settings)
        # before the first request: a stored key closes the API
        gateway.keys = await KeyStore.open(settings.data_dir, lists)
        gateway.augmenter = Augmenter(gateway)
        gateway.chat.stages.extend([ground_turn, gateway.augmenter])   # the turn's knowledge base, then its context
        app.state.gateway = gateway
        try:
            async with AsyncExitStack() as stack:
                if watch_seconds:  # says at once when the upstream is not there
                    await stack.enter_async_context(watcher.watching())
                # every knowledge base shares the upstream's slots and the metrics (proxy/knowledge/bases.py)
                limiter = PriorityLimiter(settings.llm_concurrency)
                embed_limiter = PriorityLimiter(settings.embed_concurrency)
                bases = KnowledgeBases(settings, upstream, gateway.metrics, limiter=limiter,
                                       embed_limiter=embed_limiter, lists=lists)
                await stack.enter_async_context(bases.run())   # opens none: each on its first use
                gateway.bases = bases
                gateway.models = await KnowledgeModels(settings.data_dir, lists).load()
                if lists.shared:   # another replica's change to a list reaches this one's memory
                    holders: dict[str, Holder] = {KBS: bases, KEYS: gateway.keys, MODELS: gateway.models}
                    if gateway.console is not None:   # console logouts, honoured by every replica
                        await gateway.console.auth.revoked.share(lists)
                        holders[SESSIONS] = gateway.console.auth.revoked
                    await stack.enter_async_context(following(lists, holders))
                try:
                    gateway.knowledge = bases.default = await stack.enter_async_context(
                        run_knowledge(settings, upstream, gateway.metrics, limiter=limiter,
                                      embed_limiter=embed_limiter))
                except (StoreUnavailable, OSError) as exc:
                    # the gateway keeps proxying (unaugmented) even when the store cannot open
                    gateway.knowledge_error = (exc.message if isinstance(exc, StoreUnavailable)
                                               else f"{type(exc).__name__}: {exc}")
                    bases.default_error = gateway.knowledge_error
                    log.error("knowledge store at %s unavailable: %s", settings.data_dir, gateway.knowledge_error)
                await stack.enter_async_context(mcp.serving(gateway))  # ends its calls before the store closes
                yield
        finally:
            await upstream.aclose()

    return Starlette(
        routes=[*routes_ollama.ROUTES, *routes_openai.ROUTES, *routes_health.ROUTES, *routes_documents.ROUTES,
                *routes_query.ROUTES, *routes_graph.ROUTES, *routes_kbs.ROUTES, *routes_models.ROUTES,
                *routes_keys.ROUTES, mcp.route(), *metrics_route.routes(metrics_refusal),
                *admin_mount()],
        middleware=[*build_middleware(settings), Middleware(BodyLimitMiddleware),  # after auth
                    Middleware(ReleaseLeases)],   # innermost: a request's leases on knowledge bases end with it
        exception_handlers={
            GraphGateError: on_graphgate_error,
            HTTPException: on_http_exception,
            Exception: on_unexpected,
        },
        lifespan=lifespan,
    )
