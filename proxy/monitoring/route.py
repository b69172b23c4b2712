"""GET /metrics: the Prometheus text of this gateway's registry.

Open by default, like Ollama's GET /: a Prometheus scrape job usually sends no credentials, and
the text holds counts and latencies, never a document, a question or a key. With
GRAPHGATE_METRICS_REQUIRE_KEY (and a key in use: GRAPHGATE_API_KEY or a stored one) it needs an
admin key that is not limited to some knowledge bases (the labels may name every base).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.responses import error_response
from proxy.guards.middleware import UNAUTHORIZED, KeyCheck


async def metrics(request: Request) -> Response:
    gateway = request.app.state.gateway
    settings = gateway.settings
    check = KeyCheck(settings.api_key)
    if settings.metrics_require_key and check.in_use(request.scope):
        who = check.principal(request.scope)
        if who is None:
            return error_response(request.url.path, 401, UNAUTHORIZED, headers={"www-authenticate": "Bearer"})
        if not who.unrestricted:
            return error_response(request.url.path, 403, f"forbidden: key {who.name!r} may not read the metrics "
                                  "(that needs an admin key not limited to some knowledge bases)")
    return Response(await gateway.metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})


ROUTES = [Route("/metrics", metrics, methods=["GET"])]
