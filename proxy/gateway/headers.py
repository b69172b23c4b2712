"""Header hygiene between the client and the upstream.

Towards the upstream: hop-by-hop headers go, and so do ``Origin`` and ``Referer`` (a real
Ollama answers 403 to a browser origin it does not know) and ``Host`` (httpx sets the
upstream's own). Nothing of GraphGate's own goes either: its headers (``X-GraphGate-*``, the
``X-Task`` of Open WebUI's background tasks, the console's ``X-CSRF-Token`` and cookie) are
addressed to GraphGate, and so is an ``Authorization`` that carries a GraphGate credential.

The rule for ``Authorization``: it is dropped when it is GraphGate's (the caller decides, see
``KeyCheck.own_credential``): ``GRAPHGATE_API_KEY``, a stored key (``gg_<id>_<secret>``, valid or
not: a revoked or mistyped key is still GraphGate's secret, never the upstream's). Any other token
is the client's own, meant for the upstream (an Ollama behind an authenticating proxy), and is
forwarded as it came. Once a key is in use every API request must carry one, so then nothing of
the client's reaches the upstream in this header; with none in use (Ollama itself has no auth),
the gateway is as transparent as before. We ask for an uncompressed body so that streams can be
relayed chunk for chunk.

Towards the client: hop-by-hop headers and the framing headers the server recomputes go.
"""

from __future__ import annotations

from collections.abc import Iterable

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
# GraphGate's own: its console's token and cookie (the X-GraphGate-* headers go by their prefix)
OWN = frozenset({"x-task", "x-csrf-token", "cookie"})
OWN_PREFIX = "x-graphgate-"
_NOT_TO_UPSTREAM = HOP_BY_HOP | OWN | {"host", "origin", "referer", "content-length", "accept-encoding"}
_NOT_TO_CLIENT = HOP_BY_HOP | {"content-length", "date", "server"}


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Headers named in ``Connection:`` are hop-by-hop too (RFC 9110 §7.6.1)."""
    listed: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(","))
    return listed


def to_upstream(headers: Iterable[tuple[str, str]], *, drop_authorization: bool) -> list[tuple[str, str]]:
    """The client's headers fit for the upstream; ``drop_authorization``: it carries GraphGate's credential."""
    headers = list(headers)
    drop = _NOT_TO_UPSTREAM | _connection_listed(headers)
    if drop_authorization:
        drop = drop | {"authorization"}
    kept = [(name, value) for name, value in headers
            if name.lower() not in drop and not name.lower().startswith(OWN_PREFIX)]
    kept.append(("accept-encoding", "identity"))
    return kept


def to_client(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    headers = list(headers)
    drop = _NOT_TO_CLIENT | _connection_listed(headers)
    return [(name, value) for name, value in headers if name.lower() not in drop]
