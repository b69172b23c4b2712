"""Console pages for the knowledge bases (proxy/knowledge/bases.py): the list with a form to create
one (a name and optional settings overrides), a base's page with its overrides, and its deletion,
which removes its documents and graph and so must be confirmed by typing the base's name.

Which base the other pages show is the ``kb`` in their URL (admin/kb_links.py), not this page."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin.guard import action
from admin.rendering import render
from proxy.core.errors import BadRequest, GraphGateError
from proxy.guards.access import principal, require, require_unrestricted, unknown_base
from proxy.state import bases, delete_base

OVERRIDE_ROWS = 3   # blank key/value rows the create form offers


def _visible(request: Request) -> list[dict[str, Any]]:
    who = principal(request)
    return [entry for entry in bases(request).describe() if who.sees(entry["name"])]


def _entry(request: Request, name: str) -> dict[str, Any]:
    for entry in _visible(request):
        if entry["name"] == name:
            return entry
    raise unknown_base(name)


def overrides_of(form: FormData) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The form's key/value rows as overrides (blank rows skipped; values as typed: the registry
    checks them), and the rows themselves to show again when the base is refused."""
    keys, values = form.getlist("setting"), form.getlist("value")
    rows = [(str(k).strip(), str(v)) for k, v in zip(keys, values, strict=False)]
    overrides: dict[str, str] = {}
    for key, value in rows:
        if not key:
            if value.strip():
                raise BadRequest(f"the override value {value!r} names no setting: fill in the setting's name")
            continue
        if key in overrides:
            raise BadRequest(f"the setting {key!r} is overridden twice: keep one")
        overrides[key] = value
    return overrides, [r for r in rows if r[0] or r[1].strip()]


async def kbs_page(request: Request) -> Response:
    return _list(request)


def _list(request: Request, *, error: str | None = None, name: str = "",
          rows: list[tuple[str, str]] | None = None, status: int = 200) -> Response:
    rows = list(rows or [])
    rows += [("", "")] * max(OVERRIDE_ROWS - len(rows), 1)
    return render(request, "kbs.html", {"bases": _visible(request), "error": error, "new_name": name,
                                        "rows": rows}, status=status)


@action
async def create(request: Request) -> Response:
    form = await request.form()
    name = str(form.get("name") or "").strip()
    rows: list[tuple[str, str]] = []
    try:
        require_unrestricted(request, "creating a knowledge base")
        overrides, rows = overrides_of(form)
        if not name:
            raise BadRequest("a knowledge base needs a name")
        await bases(request).create(name, overrides)
    except GraphGateError as exc:
        if exc.status >= 500:
            raise
        # said above the form, with what was typed, and nothing was made
        return _list(request, error=exc.message, name=name, rows=rows, status=exc.status)
    return RedirectResponse(f"/admin/kbs/{name}", status_code=303)


def _models_of(request: Request, name: str) -> list[dict[str, Any]]:
    """The knowledge models grounded in the base (a chat with one fails once the base is gone)."""
    models = request.app.state.gateway.models
    return models.list([name]) if models is not None else []


def _base_page(request: Request, entry: dict[str, Any], *, error: str | None = None, status: int = 200) -> Response:
    return render(request, "kb.html", {"base": entry, "error": error, "models": _models_of(request, entry["name"])},
                  status=status)


async def kb_page(request: Request) -> Response:
    return _base_page(request, _entry(request, request.path_params["name"]))


@action
async def delete(request: Request) -> Response:
    name = request.path_params["name"]
    entry = _entry(request, name)
    require(request, name, "admin")
    typed = str((await request.form()).get("confirm") or "").strip()
    if typed != name:
        message = (f"type the base's name, {name}, to delete it" if not typed
                   else f"{typed!r} is not {name!r}: nothing was deleted")
        return _base_page(request, entry, error=message, status=400)
    await delete_base(request, name)
    return RedirectResponse("/admin/kbs", status_code=303)


ROUTES = [
    Route("/kbs", kbs_page, methods=["GET"]),
    Route("/kbs", create, methods=["POST"]),
    Route("/kbs/{name}", kb_page, methods=["GET"]),
    Route("/kbs/{name}/delete", delete, methods=["POST"]),
]
