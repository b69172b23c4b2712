"""Header hygiene between the client and the upstream.

Towards the upstream: hop-by-hop headers go, and so do ``Origin`` and ``Referer`` (a real
Ollama answers 403 to a browser origin it does not know) and ``Host`` (httpx sets the
upstream's own). GraphGate's API key is GraphGate's, not the upstream's. We ask for an
uncompressed body so that streams can be relayed chunk for chunk.

Towards the client: hop-by-hop headers and the framing headers the server recomputes go.
"""

from __future__ import annotations

from collections.abc import Iterable

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
_NOT_TO_UPSTREAM = HOP_BY_HOP | {"host", "origin", "referer", "content-length", "accept-encoding",
                                 "cookie"}
_NOT_TO_CLIENT = HOP_BY_HOP | {"content-length", "date", "server"}


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Headers named in ``Connection:`` are hop-by-hop too (RFC 9110 §7.6.1)."""
    listed: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(","))
    return listed


def to_upstream(headers: Iterable[tuple[str, str]], *, drop_authorization: bool) -> list[tuple[str, str]]:
    headers = list(headers)
    drop = _NOT_TO_UPSTREAM | _connection_listed(headers)
    if drop_authorization:
        drop = drop | {"authorization"}
    kept = [(name, value) for name, value in headers if name.lower() not in drop]
    kept.append(("accept-encoding", "identity"))
    return kept


def to_client(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    headers = list(headers)
    drop = _NOT_TO_CLIENT | _connection_listed(headers)
    return [(name, value) for name, value in headers if name.lower() not in drop]
