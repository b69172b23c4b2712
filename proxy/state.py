"""What request handlers reach through ``request.app.state.gateway``: the resources the app's
lifespan builds (proxy/app.py). Only types are imported here, so any route module may use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request

from proxy.control.principals import Role
from proxy.core.errors import NotFound, ServiceUnavailable
from proxy.guards.access import require
from proxy.knowledge.bases import REQUEST_LEASES, acquire_for_request

if TYPE_CHECKING:
    import anyio

    from proxy.control.keys import KeyStore
    from proxy.control.models import KnowledgeModels
    from proxy.core.settings import Settings
    from proxy.core.settings_sections import (
        AccessSettings,
        ChatSettings,
        MergingSettings,
        ParsingSettings,
        PlaygroundSettings,
    )
    from proxy.gateway.augment import Augmenter
    from proxy.gateway.chat import ChatPipeline
    from proxy.guards.auth import Auth
    from proxy.knowledge.bases import KnowledgeBases
    from proxy.knowledge.service import Knowledge
    from proxy.monitoring.metrics import Metrics
    from proxy.upstream.client import Upstream
    from proxy.upstream.watch import UpstreamWatcher


class ConsoleResources(Protocol):
    """What the gateway's guards need of the console's resources (``admin.console.Console``)."""

    auth: Auth


@dataclass
class Gateway:
    """What request handlers reach through ``request.app.state.gateway``."""

    settings: Settings
    upstream: Upstream
    chat: ChatPipeline
    metrics: Metrics   # GET /metrics; every part records its events here
    knowledge: Knowledge | None = None
    augmenter: Augmenter | None = None
    knowledge_error: str | None = None  # why the knowledge store is unavailable, when it is
    watcher: UpstreamWatcher | None = None  # the upstream's last known state (/rag/health, the console)
    # /rag/health's store probe: one worker thread at most, however many health requests wait
    store_probe: anyio.CapacityLimiter | None = None
    tags_cache: tuple[bytes, dict[str, str]] | None = field(default=None)
    console: ConsoleResources | None = None
    bases: KnowledgeBases | None = None   # the named knowledge bases; ``knowledge`` is ``default``'s service
    models: KnowledgeModels | None = None   # the knowledge models (aliases the chat routes resolve)
    keys: KeyStore | None = None   # the stored API keys (proxy/control/keys.py), loaded by the lifespan


LEASES = REQUEST_LEASES   # the request scope's list of lease releases (ReleaseLeases ends them)
KB_HEADER = "x-graphgate-kb"


def kb_name(request: Request) -> str:
    """The knowledge base a request names: its ``kb`` query parameter, else its ``X-GraphGate-KB``
    header, else ``default``."""
    return request.query_params.get("kb") or request.headers.get(KB_HEADER) or "default"


READING_POSTS = frozenset({"/rag/query"})   # POSTs that only read


def action_of(request: Request) -> Role:
    """What a request does to its base, for its key's role: GETs and queries read, the rest write."""
    if request.method in ("GET", "HEAD") or request.url.path in READING_POSTS:
        return "read"
    return "write"


async def knowledge(request: Request, action: Role | None = None) -> Knowledge:
    """The service of the knowledge base the request names (``kb_name``), opened if it is not; the
    request holds a lease on it until its response is sent. The request's key must allow ``action``
    on it (default: ``action_of``): 404 for a base it may not see (as for one that does not exist),
    403 for too small a role; 503 with the reason when the default store is unavailable."""
    name = kb_name(request)
    require(request, name, action or action_of(request))
    return await acquire_for_request(bases(request), name, request.scope)   # default's included


async def delete_base(request: Request, name: str) -> dict[str, Any]:
    """Delete knowledge base ``name`` with its data (the API's and the console's way): first taken
    out of the API keys that name it, so that a base made later under the name is not theirs."""
    gateway: Gateway = request.app.state.gateway
    registry = bases(request)
    registry.check_list()   # a list that cannot be read: 503, not "no such base"
    if name not in registry.names():
        raise NotFound(f"no knowledge base named {name!r}")
    if gateway.keys is not None and name != "default":
        await gateway.keys.forget_base(name)
    return await registry.delete(name)


def bases(request: Request) -> KnowledgeBases:
    """The registry of knowledge bases (503 while the gateway starts or stops)."""
    registry: KnowledgeBases | None = request.app.state.gateway.bases
    if registry is None:
        raise ServiceUnavailable("the knowledge bases are unavailable")
    return registry


def key_store(request: Request) -> KeyStore:
    """The gateway's key store (503 while the gateway starts or stops)."""
    store: KeyStore | None = request.app.state.gateway.keys
    if store is None:
        raise ServiceUnavailable("the API keys are unavailable")
    return store


def gateway_of(request: Request) -> Gateway:
    """The app's resources, typed."""
    gateway: Gateway = request.app.state.gateway
    return gateway


# the section of the settings a request handler reads (proxy/core/settings_sections.py): the type
# checker holds the handler to it; the pages that show every setting read ``gateway_of(...).settings``

def access_settings(request: Request) -> AccessSettings:
    """Keys, body bounds, console sessions: what the /rag API's routes read."""
    return gateway_of(request).settings


def parsing_settings(request: Request) -> ParsingSettings:
    """The bounds of an upload and of its parsing."""
    return gateway_of(request).settings


def chat_settings(request: Request) -> ChatSettings:
    return gateway_of(request).settings


def merging_settings(request: Request) -> MergingSettings:
    return gateway_of(request).settings


def playground_settings(request: Request) -> PlaygroundSettings:
    return gateway_of(request).settings


class ReleaseLeases:
    """Pure-ASGI middleware: the leases a request took on knowledge bases (``knowledge`` above)
    end when its response has been sent, streamed ones included."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        releases: list[Any] = []
        scope[LEASES] = releases
        try:
            await self.app(scope, receive, send)
        finally:
            for release in releases:
                release()
