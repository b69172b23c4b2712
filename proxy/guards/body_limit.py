"""Every request body is bounded before any of it is stored (in memory or in a temporary file).

One pure-ASGI middleware, outermost, wraps ``receive``: it counts the bytes of the body against a
bound chosen by the route and by whether the request carries the credentials its route needs, and
refuses with 413 as soon as the count passes it; a declared Content-Length over the bound is refused
at once, before a byte is read. Past the bound mid-body, the refusal is raised from ``receive`` as
:class:`BodyTooLarge`, so the app's own error handlers answer it in the path's shape (Ollama's
``{"error": ...}`` on the API, the console's error page under /admin); if nothing answered it,
the middleware does.

Bounds:

- ``POST /admin/login``: :data:`LOGIN_BYTES` for everyone (a password, a CSRF token, a ``next``).
- a request without the credentials its route needs: :data:`UNTRUSTED_BYTES` (it is refused anyway;
  Starlette would otherwise spool its multipart files to the temporary directory first). Credentials
  are the route's: on the API (``/api``, ``/v1``, ``/rag``, ``/mcp``) the admin key, any valid stored
  key (whatever its role: the route checks the role) or a console login; on the console what lets a
  request see it (``Auth.allowed``).
- document uploads (``POST /rag/documents``, ``POST /admin/documents``): :func:`upload_total_bytes`,
  four documents of ``GRAPHGATE_MAX_UPLOAD_BYTES`` plus 1 MiB of multipart framing.
- other console actions: :data:`CONSOLE_FORM_BYTES`.
- blob uploads (``/api/blobs/*``) from a client allowed to send them: unbounded here, they stream to
  the upstream and keep their own rules.
- everything else: ``GRAPHGATE_MAX_BODY_BYTES``.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.errors import PayloadTooLarge
from proxy.core.responses import error_response
from proxy.guards.middleware import KeyCheck, console_refusal, is_console

LOGIN_BYTES = 8 * 1024
UNTRUSTED_BYTES = LOGIN_BYTES
CONSOLE_FORM_BYTES = 1024 * 1024
UPLOAD_FILES_AT_FULL_SIZE = 4
MULTIPART_FRAMING_BYTES = 1024 * 1024
UPLOAD_PATHS = frozenset({"/rag/documents", "/admin/documents"})


class BodyTooLarge(PayloadTooLarge):
    """Raised from ``receive`` when a body passes its bound."""


def upload_total_bytes(max_upload_bytes: int) -> int:
    """The most one upload request may carry in all."""
    return UPLOAD_FILES_AT_FULL_SIZE * max_upload_bytes + MULTIPART_FRAMING_BYTES


def _trusted(scope: Scope, path: str) -> bool:
    """Does the request carry what its route needs (or does the route need nothing)?"""
    auth = scope["app"].state.gateway.console.auth
    session = auth.read(scope)
    if path == "/admin" or path.startswith("/admin/"):
        return auth.allowed(scope, session)
    if session is not None and session.authenticated:
        return True
    check: KeyCheck = auth.keys
    if check.principal(scope) is not None:   # the admin key or a stored key (found once per request)
        return True
    if check.in_use(scope):
        return False
    # no key in use: the Ollama and OpenAI surfaces are open; the rest is open without a password
    return path.startswith(("/api/", "/v1/")) or auth.password is None


def bound_for(scope: Scope) -> tuple[int | None, str]:
    """(the bound in bytes or None for none, what the bound is)."""
    gateway = getattr(scope["app"].state, "gateway", None)
    if gateway is None or gateway.console is None:  # no lifespan ran: nothing reads bodies yet
        return None, ""
    path, method = scope["path"], scope["method"]
    settings = gateway.settings
    if path == "/admin/login":
        return LOGIN_BYTES, "the bound of a login form"
    if not _trusted(scope, path):
        return UNTRUSTED_BYTES, ("the bound of a request without valid credentials: log in to the console "
                                 "or send an API key")
    if path.startswith("/api/blobs/"):
        return None, ""
    if method == "POST" and path in UPLOAD_PATHS:
        return upload_total_bytes(settings.max_upload_bytes), (
            f"one upload carries at most {UPLOAD_FILES_AT_FULL_SIZE} times GRAPHGATE_MAX_UPLOAD_BYTES in all; "
            "send the files in several uploads")
    if path.startswith("/admin/"):
        return CONSOLE_FORM_BYTES, "the bound of a console form"
    return settings.max_body_bytes, "GRAPHGATE_MAX_BODY_BYTES"


def _refusal(scope: Scope, message: str) -> Response:
    if is_console(scope):
        return console_refusal(scope, 413, message)
    return error_response(scope["path"], 413, message)


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        bound, why = bound_for(scope)
        if bound is None:
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > bound:
            message = f"request body of {declared} bytes exceeds the limit of {bound} bytes ({why})"
            return await _refusal(scope, message)(scope, receive, send)
        too_large: BodyTooLarge | None = None
        received = 0
        started = False

        async def bounded_receive() -> Message:
            nonlocal received, too_large
            if too_large is not None:
                raise too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > bound:
                    too_large = BodyTooLarge(f"request body exceeds the limit of {bound} bytes ({why})")
                    raise too_large
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, watching_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await _refusal(scope, exc.message)(scope, receive, send)
