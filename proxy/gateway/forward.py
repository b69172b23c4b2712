"""Forwarding a client request to the upstream Ollama as it is."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.gateway.headers import to_upstream
from proxy.gateway.relay import StreamRelay, relay, whole_response
from proxy.guards.middleware import KeyCheck


def upstream_path(request: Request) -> str:
    """The path as the client sent it, percent-escapes kept (decoded, "%1F" would be a control
    character no HTTP client may send)."""
    raw = request.scope.get("raw_path")
    if not raw:
        return request.url.path
    return raw.decode("latin-1").split("?", 1)[0]


def upstream_headers(request: Request) -> list[tuple[str, str]]:
    """The request's headers for the upstream: none of GraphGate's own, no GraphGate credential
    (the key guards checked it already: looked up once per request)."""
    gateway = request.app.state.gateway
    own = KeyCheck(gateway.settings.api_key).own_credential(request.scope)
    return to_upstream(request.headers.items(), drop_authorization=own)


async def forward(request: Request, *, content: Any = None) -> Response | StreamRelay:
    """Send the request (with ``content`` as its body) upstream and relay the answer."""
    gateway = request.app.state.gateway
    response = await gateway.upstream.open(
        request.method, upstream_path(request), headers=upstream_headers(request), content=content,
        params=request.url.query or None)
    return await relay(gateway.upstream, response, request.url.path)


async def forward_small(request: Request, *, content: Any = None) -> Response:
    """Like ``forward`` for the quick metadata calls, within the discovery deadline in all."""
    gateway = request.app.state.gateway
    response, body = await gateway.upstream.fetch(
        request.method, upstream_path(request), headers=upstream_headers(request), content=content,
        params=request.url.query or None, deadline=gateway.settings.discovery_timeout)
    return whole_response(response, body)
