"""The console's gate (pure ASGI, on the /admin mount) and the CSRF check of its actions.

The gate gives every browser a session cookie, lets through the login page and static files,
and answers everyone else who may not see the console (``Auth.allowed``, by ``Auth.mode``) with a
redirect to the login (a page), an HX-Redirect (an htmx request) or a 403 (the open console, no
password and no key in use, seen from beyond loopback).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admin.error_pages import refusal
from admin.rendering import PAGE_HEADERS
from proxy.actions.forms import read_form
from proxy.core.errors import Forbidden
from proxy.guards.auth import CSRF_FIELD, CSRF_HEADER, SAFE_METHODS, Auth

PUBLIC = ("/admin/login", "/admin/static/")


class ConsoleGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        auth: Auth = scope["app"].state.gateway.console.auth
        session = auth.read(scope)
        new_cookie = None
        if session is None:
            session, value = auth.issue(authenticated=False)
            new_cookie = auth.cookie_header(value, secure=scope.get("scheme") == "https")
        state = scope.setdefault("state", {})
        # bearer: an admin key in the Authorization header (a script: no cookie, so no CSRF to fear)
        state.update(session=session, csrf=auth.csrf_token(session), bearer=auth.admin_bearer(scope))
        path = scope["path"]
        if not path.startswith(PUBLIC) and not auth.allowed(scope, session):
            response = _refusal(scope, auth)
            if new_cookie:
                response.headers.append("set-cookie", new_cookie)
            return await response(scope, receive, send)

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if new_cookie:
                    headers.append("set-cookie", new_cookie)
                for name, value in PAGE_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _refusal(scope: Scope, auth: Auth) -> Response:
    headers = Headers(scope=scope)
    if auth.mode(scope) == "open":
        return refusal(scope, 403, "Without GRAPHGATE_ADMIN_PASSWORD the console answers only on this machine "
                       "(loopback). Set a password to use it from elsewhere.")
    # a password or an admin key logs in
    target = scope["path"] + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
    login = "/admin/login?next=" + quote(target, safe="")
    if headers.get("hx-request") == "true":
        return Response(status_code=401, headers={"hx-redirect": login})
    if scope["method"] in SAFE_METHODS:
        return RedirectResponse(login, status_code=303)
    # a form sent without a login, or after it ended: the error page leads to the login
    return refusal(scope, 401, "this needs a login to the console, and there is none (it has ended, or was never "
                   "made)")


Endpoint = Callable[[Request], Awaitable[Response]]


def action(endpoint: Endpoint) -> Endpoint:
    """A state-changing console endpoint: the CSRF token must come with it (header or form
    field), unless the caller authenticated with an admin key in its header (no cookie involved)."""

    @functools.wraps(endpoint)
    async def checked(request: Request) -> Response:
        state = request.scope["state"]
        if not state.get("bearer"):
            given = request.headers.get(CSRF_HEADER)
            if given is None and request.headers.get("content-type", "").startswith(
                    ("application/x-www-form-urlencoded", "multipart/form-data")):
                form = await read_form(request, max_files=100, max_fields=1000)
                value = form.get(CSRF_FIELD)
                given = value if isinstance(value, str) else None
            auth: Auth = request.app.state.gateway.console.auth
            if not auth.csrf_ok(state.get("session"), given):
                raise Forbidden("the form has expired or did not come from this console (CSRF token missing "
                                "or wrong): reload the page and try again")
        return await endpoint(request)

    return checked
