"""Who may read GET /metrics (proxy/monitoring/route.py serves it; the app hands it this gate).

Open by default, like Ollama's GET /: a Prometheus scrape job usually sends no credentials, and
the text holds counts and latencies, never a document, a question or a key. It needs an admin key
that is not limited to some knowledge bases with GRAPHGATE_METRICS_REQUIRE_KEY (and a key in use:
GRAPHGATE_API_KEY or a stored one), and always once a key limited to some bases exists: the
``kb`` labels name every base, which such a key must not learn.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.core.responses import error_response
from proxy.guards.middleware import UNAUTHORIZED, KeyCheck


def metrics_refusal(request: Request) -> Response | None:
    """The refusal a request for the metrics gets (401, 403), or None when it may read them."""
    settings = request.app.state.gateway.settings
    check = KeyCheck(settings.api_key)
    store = check.store(request.scope)
    limited = store is not None and store.some_limited
    if not ((settings.metrics_require_key or limited) and check.in_use(request.scope)):
        return None
    who = check.principal(request.scope)
    if who is None:
        return error_response(request.url.path, 401, UNAUTHORIZED, headers={"www-authenticate": "Bearer"})
    if not who.unrestricted:
        return error_response(request.url.path, 403, f"forbidden: key {who.name!r} may not read the metrics "
                              "(that needs an admin key not limited to some knowledge bases)")
    return None
