"""GET /metrics: the Prometheus text of this gateway's registry.

Open by default, like Ollama's GET /: a Prometheus scrape job usually sends no credentials, and
the text holds counts and latencies, never a document, a question or a key. With
GRAPHGATE_METRICS_REQUIRE_KEY (and GRAPHGATE_API_KEY set) it needs the key like /api/*.
"""

from __future__ import annotations

import hmac

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.responses import error_response


async def metrics(request: Request) -> Response:
    gateway = request.app.state.gateway
    settings = gateway.settings
    if settings.metrics_require_key and settings.api_key:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {settings.api_key}".encode()):
            return error_response(request.url.path, 401, "unauthorized: a valid API key is required "
                                  "(Authorization: Bearer <key>)", headers={"www-authenticate": "Bearer"})
    return Response(await gateway.metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})


ROUTES = [Route("/metrics", metrics, methods=["GET"])]
