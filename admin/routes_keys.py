"""Console page for the API keys (proxy/control/keys.py): the list (never a secret), a form that makes
a key and shows its token once, and revocation after a confirmation. Keys are the unrestricted
admin's, which a console login is."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.rendering import render
from proxy.control.principals import ROLES
from proxy.core.errors import BadRequest, NotFound
from proxy.guards.access import require_unrestricted
from proxy.state import bases, key_store


def _page(request: Request, status: int = 200, **context: Any) -> Response:
    store = key_store(request)
    values = {"name": "", "role": "read", "kbs": [], **context.pop("values", {})}
    shown = {"created": None, "token": None, "confirm": None, "error": None, **context}
    return render(request, "keys.html", {"keys": store.describe(), "roles": ROLES,
                                         "bases": bases(request).names(), "values": values,
                                         "broken": store.broken, **shown}, status=status)


async def keys_page(request: Request) -> Response:
    require_unrestricted(request, "managing API keys")
    return _page(request)


@action
async def create(request: Request) -> Response:
    require_unrestricted(request, "creating an API key")
    form = await request.form()
    name, role = form.get("name"), form.get("role")
    kbs = [kb for kb in form.getlist("kb") if isinstance(kb, str)]
    values = {"name": name if isinstance(name, str) else "", "role": role, "kbs": kbs}
    try:
        key, token = await key_store(request).create(name, role, kbs or None, bases(request).names())
    except BadRequest as exc:   # the form again, as it was filled, with the reason
        return _page(request, 400, error=exc.message, values=values)
    # the token is in this page only: never in a URL, never stored (the guard sends no-store)
    return _page(request, 201, created=key.describe(), token=token)


async def confirm_revoke(request: Request) -> Response:
    require_unrestricted(request, "revoking an API key")
    key = key_store(request).keys.get(request.path_params["id"])
    if key is None:
        raise NotFound("no API key with that id (it may have been revoked already)")
    return _page(request, confirm=key.describe())


@action
async def revoke(request: Request) -> Response:
    require_unrestricted(request, "revoking an API key")
    key = await key_store(request).revoke(request.path_params["id"])
    return flash.redirect(request, "/admin/keys", f"Revoked the key “{key.name}”: clients using it are refused "
                          "from now on.")


ROUTES = [
    Route("/keys", keys_page, methods=["GET"]),
    Route("/keys", create, methods=["POST"]),
    Route("/keys/{id}/revoke", confirm_revoke, methods=["GET"]),
    Route("/keys/{id}/revoke", revoke, methods=["POST"]),
]
