"""Logging in and out of the console: with the password, or, with none set while keys are in use,
with an admin key (proxy/guards/auth.py says when which)."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.rendering import render
from proxy.guards.auth import Auth
from proxy.guards.login_limit import client_key

FAILED_LOGIN_DELAY = 0.5  # seconds: slows each guess down; proxy/guards/login_limit.py bounds how many there are


def _next(request: Request, raw: object) -> str:
    # only a path on this console: never an open redirect to another site
    target = raw if isinstance(raw, str) else ""
    return target if target.startswith("/admin") and not target.startswith("//") else "/admin/"


WRONG_KEY = ("That is not an admin key of every knowledge base: give GRAPHGATE_API_KEY, or a stored key with "
             "the role admin that is limited to no base.")


async def login_page(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    if auth.mode(request.scope) == "open":
        return RedirectResponse("/admin/", status_code=303)
    return render(request, "login.html", {"next": _next(request, request.query_params.get("next")), "error": None})


@action
async def login(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    form = await request.form()
    target = _next(request, form.get("next"))
    mode = auth.mode(request.scope)
    if mode == "open":
        return RedirectResponse("/admin/", status_code=303)
    client = client_key(request.client.host if request.client else None)
    refused = auth.logins.admit(client)  # a slot taken before the check: parallel guesses count too
    if refused is not None:
        wait, whose = refused
        who = "from your address" if whose == "client" else "on this console (from all addresses together)"
        error = f"Too many login attempts {who}. Try again in {wait} seconds."
        return render(request, "login.html", {"next": target, "error": error}, status=429,
                      headers={"retry-after": str(wait)})
    given = form.get("password" if mode == "password" else "key")
    key = None
    if mode == "password":
        ok = isinstance(given, str) and auth.password_ok(given)
    else:
        key = auth.key_login(request.scope, given.strip()) if isinstance(given, str) else None
        ok = key is not None
    if not ok:
        await anyio.sleep(FAILED_LOGIN_DELAY)
        error = "Wrong password." if mode == "password" else WRONG_KEY
        return render(request, "login.html", {"next": target, "error": error}, status=401)
    auth.logins.succeeded(client)
    _, value = auth.issue(authenticated=True, key=key)  # a fresh session id: no fixation
    response = RedirectResponse(target, status_code=303)
    response.headers.append("set-cookie", auth.cookie_header(value, secure=request.url.scheme == "https"))
    return response


@action
async def logout(request: Request) -> Response:
    auth: Auth = request.app.state.gateway.console.auth
    await auth.revoke(request.scope["state"].get("session"))  # the old cookie must not work anywhere
    response = flash.redirect(request, "/admin/" if auth.mode(request.scope) == "open" else "/admin/login",
                              "You are logged out.")
    response.headers.append("set-cookie", auth.clear_cookie_header())
    return response


ROUTES = [
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
