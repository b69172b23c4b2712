"""Logging in and out of the console."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin.guard import action
from admin.rendering import render
from proxy.guards.auth import Auth
from proxy.guards.login_limit import client_key

FAILED_LOGIN_DELAY = 0.5  # seconds: slows each guess down; proxy/guards/login_limit.py bounds how many there are


def _next(request: Request, raw: object) -> str:
    # only a path on this console: never an open redirect to another site
    target = raw if isinstance(raw, str) else ""
    return target if target.startswith("/admin") and not target.startswith("//") else "/admin/"


async def login_page(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    if auth.password is None:
        return RedirectResponse("/admin/", status_code=303)
    return render(request, "login.html", {"next": _next(request, request.query_params.get("next")), "error": None})


@action
async def login(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    form = await request.form()
    target = _next(request, form.get("next"))
    password = form.get("password")
    if auth.password is None:
        return RedirectResponse("/admin/", status_code=303)
    client = client_key(request.client.host if request.client else None)
    refused = auth.logins.admit(client)  # a slot taken before the check: parallel guesses count too
    if refused is not None:
        wait, whose = refused
        who = "from your address" if whose == "client" else "on this console (from all addresses together)"
        error = f"Too many login attempts {who}. Try again in {wait} seconds."
        return render(request, "login.html", {"next": target, "error": error}, status=429,
                      headers={"retry-after": str(wait)})
    if not isinstance(password, str) or not auth.password_ok(password):
        await anyio.sleep(FAILED_LOGIN_DELAY)
        return render(request, "login.html", {"next": target, "error": "Wrong password."}, status=401)
    auth.logins.succeeded(client)
    _, value = auth.issue(authenticated=True)  # a fresh session id: no fixation
    response = RedirectResponse(target, status_code=303)
    response.headers.append("set-cookie", auth.cookie_header(value, secure=request.url.scheme == "https"))
    return response


@action
async def logout(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    await auth.revoke(request.scope["state"].get("session"))  # the old cookie must not work anywhere
    response = RedirectResponse("/admin/login" if auth.password else "/admin/", status_code=303)
    response.headers.append("set-cookie", auth.clear_cookie_header())
    return response


ROUTES = [
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
