"""GRAPHGATE_TRUSTED_PROXIES: the reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed.

None by default: the client is the TCP peer. A forwarded header is only as true as whoever wrote it,
and uvicorn's own default (believe 127.0.0.1) lets any local process claim any address, past the
console's per-address login limit (proxy/guards/login_limit.py). An operator with a proxy in front
names it here; uvicorn then takes the client from the headers of requests that come from it.
"""

from __future__ import annotations

import ipaddress


def parse_trusted_proxies(raw: str) -> tuple[str, ...]:
    """Comma-separated IP addresses or networks (``10.0.0.0/8``), or ``*`` for any peer."""
    found = []
    for piece in raw.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if piece == "*":
            found.append(piece)
            continue
        try:
            found.append(str(ipaddress.ip_network(piece, strict=False)) if "/" in piece
                         else str(ipaddress.ip_address(piece)))
        except ValueError:
            raise ValueError(f"{piece!r} is not an IP address or network (a proxy is named by its address)") from None
    return tuple(dict.fromkeys(found))
