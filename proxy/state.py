"""What request handlers reach through ``request.app.state.gateway``: the resources the app's
lifespan builds (proxy/app.py). Only types are imported here, so any route module may use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from starlette.requests import Request

from proxy.core.errors import ServiceUnavailable

if TYPE_CHECKING:
    import anyio

    from proxy.core.settings import Settings
    from proxy.gateway.augment import Augmenter
    from proxy.gateway.chat import ChatPipeline
    from proxy.guards.auth import Auth
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


def knowledge(request: Request) -> Knowledge:
    """The knowledge service, or 503 with the reason the store is unavailable."""
    gateway: Gateway = request.app.state.gateway
    if gateway.knowledge is None:
        raise ServiceUnavailable(f"the knowledge store is unavailable: {gateway.knowledge_error}")
    return gateway.knowledge
