"""GET /metrics: the Prometheus text of this gateway's registry, behind the gate the app hands it
(proxy/guards/metrics_gate.py says who may read it)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Gate = Callable[[Request], Response | None]   # a refusal, or None to serve


def routes(gate: Gate) -> list[Route]:
    async def metrics(request: Request) -> Response:
        refusal = gate(request)
        if refusal is not None:
            return refusal
        return Response(await request.app.state.gateway.metrics.render(),
                        headers={"content-type": CONTENT_TYPE_LATEST})

    return [Route("/metrics", metrics, methods=["GET"])]
