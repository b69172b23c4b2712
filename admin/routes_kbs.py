"""Console pages for the knowledge bases (proxy/knowledge/bases.py): the list with a form to create
one (a name and optional settings overrides), a base's page with its overrides, and its deletion,
which removes its documents and graph and so must be confirmed by typing the base's name.

Which base the other pages show is the ``kb`` in their URL (admin/kb_links.py), not this page."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.rendering import render
from proxy.core.errors import BadRequest, GraphGateError
from proxy.guards.access import principal, require, require_unrestricted, unknown_base
from proxy.knowledge.base_settings import OVERRIDABLE, effective_values
from proxy.state import bases, delete_base, gateway_of

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
                                        "rows": rows, "overridable": OVERRIDABLE}, status=status)


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
    return flash.redirect(request, f"/admin/kbs/{name}", f"Created the knowledge base “{name}”.")


def _models_of(request: Request, name: str) -> list[dict[str, Any]]:
    """The knowledge models grounded in the base (a chat with one fails once the base is gone)."""
    models = request.app.state.gateway.models
    return models.list([name]) if models is not None else []


def shown(value: Any) -> str:
    """A setting's value as the settings form shows it (entity types comma-separated; no
    extraction model set: the upstream's first chat model, as the dashboard says)."""
    if value is None:
        return "the upstream's first chat model"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _base_page(request: Request, name: str, *, error: str | None = None, settings_error: str | None = None,
               typed: dict[str, str] | None = None, status: int = 200) -> Response:
    _entry(request, name)   # 404 for a base the request may not see
    detail = bases(request).detail(name)
    overrides = {key: shown(value) for key, value in detail["settings"].items()}
    return render(request, "kb.html", {
        "base": detail, "error": error, "models": _models_of(request, name), "overridable": OVERRIDABLE,
        "effective": {key: shown(v) for key, v in (detail.get("effective") or {}).items()},
        "gateway": {key: shown(v) for key, v in effective_values(gateway_of(request).settings).items()},
        "typed": typed if typed is not None else overrides, "settings_error": settings_error}, status=status)


async def kb_page(request: Request) -> Response:
    return _base_page(request, request.path_params["name"])


@action
async def change_settings(request: Request) -> Response:
    """The settings form: a filled field sets the base's override, an empty one removes it (the
    gateway's value then applies). All checked first: a refusal changes nothing."""
    name = request.path_params["name"]
    _entry(request, name)
    require(request, name, "admin")
    form = await request.form()
    typed = {key: str(form.get(key) or "").strip() for key in OVERRIDABLE}
    try:
        await bases(request).update(name, {key: value or None for key, value in typed.items()})
    except GraphGateError as exc:
        if exc.status >= 500:
            raise
        return _base_page(request, name, settings_error=exc.message, typed=typed, status=exc.status)
    return flash.redirect(request, f"/admin/kbs/{name}", "Saved the settings: they apply from the base's next "
                          "opening.")


@action
async def delete(request: Request) -> Response:
    name = request.path_params["name"]
    _entry(request, name)
    require(request, name, "admin")
    typed = str((await request.form()).get("confirm") or "").strip()
    if typed != name:
        message = (f"type the base's name, {name}, to delete it" if not typed
                   else f"{typed!r} is not {name!r}: nothing was deleted")
        return _base_page(request, name, error=message, status=400)
    await delete_base(request, name)
    return flash.redirect(request, "/admin/kbs", f"Deleted the knowledge base “{name}” with its documents and "
                          "graph.")


ROUTES = [
    Route("/kbs", kbs_page, methods=["GET"]),
    Route("/kbs", create, methods=["POST"]),
    Route("/kbs/{name}", kb_page, methods=["GET"]),
    Route("/kbs/{name}/settings", change_settings, methods=["POST"]),
    Route("/kbs/{name}/delete", delete, methods=["POST"]),
]
