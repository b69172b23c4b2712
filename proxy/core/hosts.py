"""Which Host header names a request may carry: the defence against DNS rebinding.

A page on ``http://rebind.attacker.example:11435`` whose name the attacker re-points at
127.0.0.1 talks to a loopback-bound gateway as "same origin", with its own name in ``Host``.
So on a loopback bind (and wherever ``GRAPHGATE_ALLOWED_HOSTS`` is set) a request must name the
gateway by an IP literal, ``localhost`` (or a ``*.localhost`` name, which resolves to loopback
only), or a name of that setting. An IP literal cannot be re-pointed, so it is always fine.

On a non-loopback bind with the setting unset the check is off, as in Ollama: the gateway is
then reached under names it cannot know (a LAN name, a reverse proxy's, a container mapping),
and the network can reach the API directly anyway. What a loopback client is granted there
(the password-less console) still needs an allowed Host (``host_allowed`` in proxy/guards/auth.py).
"""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.types import Scope


def host_name(raw: str) -> str:
    """The name part of a Host header value (no port, lower case, no trailing dot)."""
    raw = raw.strip().lower()
    if raw.startswith("["):  # [::1]:port
        end = raw.find("]")
        return raw[1:end] if end > 0 else raw
    name, colon, port = raw.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        raw = name
    elif colon and not port and ":" not in name:  # "localhost:" (an empty port)
        raw = name
    return raw.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def name_allowed(name: str, extra: tuple[str, ...]) -> bool:
    if not name or is_ip_literal(name) or name == "localhost" or name.endswith(".localhost"):
        return True
    for allowed in extra:
        if allowed == "*" or name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])):
            return True
    return False


def bind_is_loopback(host: str) -> bool:
    name = host_name(host) if host.startswith("[") else host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def request_host_allowed(scope: Scope, extra: tuple[str, ...]) -> bool:
    """Does this request name the gateway by an allowed host? (Every Host header must.)"""
    values = Headers(scope=scope).getlist("host")
    if len(values) > 1:
        return False
    return name_allowed(host_name(values[0]) if values else "", extra)


def parse_allowed_hosts(raw: str) -> tuple[str, ...]:
    """Comma-separated host names (any port), ``*.example.com`` for a domain's names, or ``*``."""
    names = []
    for piece in raw.split(","):
        piece = piece.strip().lower()
        if not piece:
            continue
        if "://" in piece or "/" in piece:
            raise ValueError(f"{piece!r}: give a host name such as gateway.lan, not a URL")
        name = piece if piece == "*" or piece.startswith("*.") else host_name(piece)
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"{piece!r} is not a host name")
        names.append(name)
    return tuple(dict.fromkeys(names))


def local_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a gateway bound to ``host``:``port`` (a wildcard bind
    is reached on loopback; an IPv6 address goes in brackets)."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"
