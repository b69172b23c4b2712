"""Pure-ASGI middleware on the request path: the Host check, CORS and the API keys.

All are pure ASGI (not BaseHTTPMiddleware) so that streamed replies pass through untouched.
``build_middleware`` fixes their order: the Host check outermost (a rebinding page is refused
before anything else), then CORS, because browsers send preflights without credentials.
"""

from __future__ import annotations

import hmac
import html
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.control.keys import TOKEN_PREFIX, KeyStore
from proxy.control.principals import ADMIN, Principal
from proxy.core.hosts import bind_is_loopback, request_host_allowed
from proxy.core.responses import error_response
from proxy.core.settings_sections import AccessSettings
from proxy.guards.access import PRINCIPAL

PROTECTED_PREFIXES = ("/api/", "/v1/", "/rag/")
# readable by anyone who can reach the gateway, like Ollama's GET /: a container health check or a
# load balancer has no key (routes_health says why it shows nothing secret)
PUBLIC_READS = frozenset({"/rag/health"})


def is_public_read(scope: Scope) -> bool:
    return scope["path"] in PUBLIC_READS and scope["method"] in ("GET", "HEAD")


def is_console(scope: Scope) -> bool:
    return scope["path"] == "/admin" or scope["path"].startswith("/admin/")


@runtime_checkable
class ConsolePages(Protocol):
    """How the console renders a refusal of one of its addresses (``admin.console.Console``)."""

    def refusal(self, scope: Scope, status: int, message: str, *, back: tuple[str, str] | None = None,
                standalone: bool = False) -> Response: ...


def console_refusal(scope: Scope, status: int, message: str, *, back: tuple[str, str] | None = None,
                    standalone: bool = False) -> Response:
    """A guard's refusal of an /admin address as the console's own error page (styled, with a way
    back); a plain page only before the console exists (no lifespan has run)."""
    gateway = getattr(scope["app"].state, "gateway", None) if "app" in scope else None
    console = getattr(gateway, "console", None)
    if isinstance(console, ConsolePages):
        return console.refusal(scope, status, message, back=back, standalone=standalone)
    return HTMLResponse(f"<!doctype html><title>GraphGate console</title><p>{status}: {html.escape(message)}</p>",
                        status_code=status)


def _origin_pattern(origins: Sequence[str]) -> re.Pattern[str]:
    parts = [".*" if o == "*" else ".*".join(re.escape(piece) for piece in o.split("*")) for o in origins]
    return re.compile("|".join(f"(?:{p})" for p in parts) or "(?!)")


class HostCheckMiddleware:
    """Refuses a request whose Host header names the gateway by a name that is not allowed (DNS
    rebinding, see proxy/hosts.py): 403 and nothing done, on every route."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or request_host_allowed(scope, self.allowed):
            return await self.app(scope, receive, send)
        host = Headers(scope=scope).get("host", "")
        message = (f"host {host[:100]!r} is not allowed: open the gateway as localhost or 127.0.0.1, or add the "
                   "name to GRAPHGATE_ALLOWED_HOSTS")
        if is_console(scope):
            # standalone: the page's stylesheet, under this name, would be refused too
            response = console_refusal(scope, 403, message, standalone=True,
                                       back=(f"http://localhost:{_port(scope, host)}/admin/",
                                             "Open the console as localhost"))
        else:
            response = error_response(scope["path"], 403, message)
        await response(scope, receive, send)


def _port(scope: Scope, host: str) -> int:
    """The port the browser used (the Host header's), else the one the connection reached."""
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and not name.endswith(":"):
        return int(port)
    server = scope.get("server")
    return server[1] if server and server[1] else 80


class CORSMiddleware:
    """Answers preflights itself; refuses browser origins that are neither allowed nor same-origin."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.allowed = _origin_pattern(origins)

    def origin_allowed(self, origin: str, headers: Headers) -> bool:
        host = headers.get("host", "")
        same_origin = bool(host) and origin.split("://", 1)[-1] == host
        return same_origin or self.allowed.fullmatch(origin) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None:
            return await self.app(scope, receive, send)
        if not self.origin_allowed(origin, headers):
            message = f"origin {origin} is not allowed (add it to GRAPHGATE_CORS_ORIGINS)"
            response = (console_refusal(scope, 403, message) if is_console(scope)
                        else error_response(scope["path"], 403, message))
            return await response(scope, receive, send)
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            return await self._preflight(scope, receive, send, origin, headers)

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["access-control-allow-origin"] = origin
                out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, scope: Scope, receive: Receive, send: Send, origin: str,
                         headers: Headers) -> None:
        requested = headers.get("access-control-request-headers", "")
        response = Response(status_code=204, headers={
            "access-control-allow-origin": origin,
            "access-control-allow-methods": "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
            "access-control-allow-headers": requested or "authorization, content-type",
            "access-control-max-age": "600",
            "vary": "Origin",
        })
        await response(scope, receive, send)


MODEL_MANAGEMENT = frozenset({"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"})
UNAUTHORIZED = "unauthorized: a valid API key is required (Authorization: Bearer <key>)"


def manages_models(path: str) -> bool:
    """Ollama's calls that change the upstream's models (for every user of it): an unrestricted admin's."""
    return path in MODEL_MANAGEMENT or path.startswith("/api/blobs/")


FOUND = "graphgate.bearer"   # the request scope's key for what its Authorization header was found to be


class KeyCheck:
    """Who a request's ``Authorization: Bearer`` header says it is: ``GRAPHGATE_API_KEY`` is the
    unrestricted admin, a stored key (proxy/control/keys.py) its own principal. The stored keys are
    the gateway's, made and revoked at run time, so they are looked up per request (one hash and a
    dict lookup), once: the answer is kept in the request's scope for the guards behind (the body
    bounds, the console, the header hygiene towards the upstream)."""

    def __init__(self, api_key: str | None) -> None:
        self.expected = f"Bearer {api_key}".encode() if api_key else None

    @staticmethod
    def store(scope: Scope) -> KeyStore | None:
        gateway = getattr(scope["app"].state, "gateway", None) if "app" in scope else None
        return getattr(gateway, "keys", None)

    def in_use(self, scope: Scope) -> bool:
        """Whether the API surfaces need a key: GRAPHGATE_API_KEY is set, or a key is stored."""
        if self.expected is not None:
            return True
        store = self.store(scope)
        return store is not None and store.in_use

    def principal(self, scope: Scope) -> Principal | None:
        """The principal of the request's key (the admin key or a stored key), or None."""
        given = Headers(scope=scope).get("authorization", "")
        found = scope.get(FOUND)
        if found is not None and found[0] == (self.expected, given):
            return found[1]   # this request's header, checked already
        who = self._verify(scope, given)
        scope[FOUND] = ((self.expected, given), who)
        return who

    def _verify(self, scope: Scope, given: str) -> Principal | None:
        if self.expected is not None and hmac.compare_digest(given.encode(), self.expected):
            return ADMIN
        store = self.store(scope)
        token = bearer_token(given)
        if store is None or token is None:
            return None
        key = store.verify(token)
        return None if key is None else key.principal

    def own_credential(self, scope: Scope) -> bool:
        """Whether the request's Authorization is GraphGate's: the admin key, a stored key, or any token
        of a stored key's shape (a revoked or mistyped one is still GraphGate's, not the upstream's)."""
        if self.principal(scope) is not None:
            return True
        token = bearer_token(Headers(scope=scope).get("authorization", ""))
        return token is not None and token.startswith(TOKEN_PREFIX)


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def mark(scope: Scope, who: Principal) -> None:
    scope[PRINCIPAL] = who


class APIKeyMiddleware:
    """Once a key is in use (GRAPHGATE_API_KEY, or any stored key), the API surfaces need
    ``Authorization: Bearer <key>``; the request's scope then holds its principal. Changing the
    upstream's models needs an unrestricted admin. With no key in use, everything passes as before."""

    def __init__(self, app: ASGIApp, api_key: str | None, prefixes: Sequence[str] = PROTECTED_PREFIXES) -> None:
        self.app = app
        self.check = KeyCheck(api_key)
        self.prefixes = tuple(prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes) and not is_public_read(scope) \
                and self.check.in_use(scope):
            who = self.check.principal(scope)
            if who is None:
                response = error_response(scope["path"], 401, UNAUTHORIZED, headers={"www-authenticate": "Bearer"})
                return await response(scope, receive, send)
            if manages_models(scope["path"]) and not who.unrestricted:
                response = error_response(scope["path"], 403, f"forbidden: key {who.name!r} may not manage "
                                          "models (that needs an admin key not limited to some knowledge bases)")
                return await response(scope, receive, send)
            mark(scope, who)
        await self.app(scope, receive, send)


class RagAccessMiddleware:
    """``/rag/*`` with a console password: every call (bar ``PUBLIC_READS``) needs an API key or a
    console login (an unrestricted admin); one that changes the store with a login also needs its
    CSRF token in X-CSRF-Token, since a cookie is ambient."""

    READS = frozenset({"GET", "HEAD", "OPTIONS"})
    QUERIES = ("/rag/query",)  # a POST that reads

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.check = KeyCheck(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/rag/") or is_public_read(scope):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        who = self.check.principal(scope)
        if who is not None:
            mark(scope, who)
            return await self.app(scope, receive, send)
        auth = scope["app"].state.gateway.console.auth
        session = auth.read(scope)
        logged_in = session is not None and session.authenticated
        reading = scope["method"] in self.READS or scope["path"] in self.QUERIES
        if logged_in and (reading or auth.csrf_ok(session, headers.get("x-csrf-token"))):
            mark(scope, ADMIN)
            return await self.app(scope, receive, send)
        # reads too: the store holds the documents and every user's questions (the traces), which the
        # console shows only after the login
        if self.check.in_use(scope):
            message = UNAUTHORIZED
        elif reading:
            message = ("unauthorized: log in to the console (the same password) or set GRAPHGATE_API_KEY and "
                       "send it (Authorization: Bearer <key>)")
        else:
            message = ("unauthorized: this call changes the knowledge store; log in to the console (and send its "
                       "X-CSRF-Token) or set GRAPHGATE_API_KEY and send it")
        response = error_response(scope["path"], 401, message, headers={"www-authenticate": "Bearer"})
        await response(scope, receive, send)


def build_middleware(settings: AccessSettings) -> list[Middleware]:
    stack = [Middleware(CORSMiddleware, origins=settings.cors_origins)]
    if settings.allowed_hosts or bind_is_loopback(settings.host):  # outermost: preflights too
        stack.insert(0, Middleware(HostCheckMiddleware, allowed=settings.allowed_hosts))
    # always there: stored keys are made at run time, and the first one closes the API
    if settings.admin_password:
        stack.append(Middleware(RagAccessMiddleware, api_key=settings.api_key))
        # /rag/ is the RagAccessMiddleware's: a key or a console login
        stack.append(Middleware(APIKeyMiddleware, api_key=settings.api_key, prefixes=("/api/", "/v1/")))
    else:
        stack.append(Middleware(APIKeyMiddleware, api_key=settings.api_key))
    return stack
