"""Console pages for the knowledge models (proxy/control/models.py): the list (each alias
with its base model, and whether the upstream has it), a form to create one, an alias's page to
edit it, and its deletion after a confirmation page. The same checks as ``PUT /rag/models``: a
refusal is said above the form, with what was typed, and nothing is stored."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.rendering import render
from proxy.actions.models import refresh_upstream_names, registry, save_model, visible_model
from proxy.core import json_text
from proxy.core.errors import BadRequest, GraphGateError
from proxy.core.modes import MODES
from proxy.guards.access import principal, require
from proxy.state import bases

BLANK = {"alias": "", "model": "", "kb": "default", "mode": "", "system": "", "options": ""}


def _visible(request: Request, alias: str) -> dict[str, Any]:
    """The alias's description, when the request may see its base (404 as for an unknown name otherwise)."""
    return registry(request).get(visible_model(request, alias).alias)


def _as_form(model: dict[str, Any]) -> dict[str, str]:
    """A model's description as the form's fields."""
    return {"alias": model["alias"], "model": model["model"], "kb": model["kb"], "mode": model["mode"] or "",
            "system": model["system"] or "",
            "options": json.dumps(model["options"], indent=2, ensure_ascii=False) if model["options"] else ""}


async def _choices(request: Request) -> dict[str, Any]:
    """What the form offers: the upstream's models (None when it cannot be read: a text field
    then), the bases the request may see, the modes."""
    await refresh_upstream_names(request)
    upstream = registry(request).upstream_models
    return {"upstream_models": sorted(upstream) if upstream is not None else None,
            "kb_names": principal(request).visible(bases(request).names()), "modes": MODES}


async def models_page(request: Request) -> Response:
    return await _list(request)


async def _list(request: Request, *, values: dict[str, str] | None = None, error: str | None = None,
                status: int = 200) -> Response:
    choices = await _choices(request)   # first: the list's "base model present" comes from it
    who = principal(request)
    models = registry(request).list(None if who.kbs is None else who.kbs)
    return render(request, "models.html", {"models": models, "values": values or dict(BLANK), "error": error,
                                           "editing": None, **choices}, status=status)


async def _edit(request: Request, alias: str, *, values: dict[str, str] | None = None, error: str | None = None,
                status: int = 200) -> Response:
    choices = await _choices(request)
    model = _visible(request, alias)
    return render(request, "model.html", {"model": model, "values": values or _as_form(model), "error": error,
                                          "editing": model["alias"], **choices}, status=status)


def values_of(form: FormData) -> dict[str, str]:
    """The form's fields as typed (shown again when they are refused)."""
    values = {key: str(form.get(key) or "") for key in BLANK}
    values["alias"] = values["alias"].strip()
    return values


def spec_of(values: dict[str, str]) -> dict[str, Any]:
    """The knowledge model the form's fields describe (``PUT /rag/models``'s body)."""
    spec: dict[str, Any] = {"model": values["model"].strip(), "kb": values["kb"] or "default",
                            "mode": values["mode"] or None, "system": values["system"].strip() or None}
    text = values["options"].strip()
    if text:
        try:
            spec["options"] = json_text.loads(text, storable=True)   # bounded: not too deep, no lone surrogate
        except ValueError as exc:
            raise BadRequest(f"options must be a JSON object, as in Ollama's requests (e.g. {{\"temperature\": "
                             f"0.2}}): {exc}") from None
        if not isinstance(spec["options"], dict):
            raise BadRequest("options must be a JSON object, as in Ollama's requests (e.g. {\"temperature\": 0.2})")
    return spec


@action
async def create(request: Request) -> Response:
    values = values_of(await request.form())
    try:
        model, _ = await save_model(request, values["alias"], spec_of(values), replace=False)
    except GraphGateError as exc:
        if exc.status >= 500:
            raise
        return await _list(request, values=values, error=exc.message, status=exc.status)
    return flash.redirect(request, "/admin/models", f"Created the knowledge model “{model['alias']}”.")


async def model_page(request: Request) -> Response:
    return await _edit(request, request.path_params["alias"])


@action
async def update(request: Request) -> Response:
    alias = _visible(request, request.path_params["alias"])["alias"]
    values = {**values_of(await request.form()), "alias": alias}   # the page's: renaming is a new model
    try:
        await save_model(request, alias, spec_of(values))
    except GraphGateError as exc:
        if exc.status >= 500:
            raise
        return await _edit(request, alias, values=values, error=exc.message, status=exc.status)
    return flash.redirect(request, "/admin/models", f"Saved the knowledge model “{alias}”.")


async def confirm_delete(request: Request) -> Response:
    return render(request, "model_delete.html", {"model": _visible(request, request.path_params["alias"])})


@action
async def delete(request: Request) -> Response:
    model = _visible(request, request.path_params["alias"])
    require(request, model["kb"], "admin")
    await registry(request).delete(model["alias"])
    return flash.redirect(request, "/admin/models", f"Deleted the knowledge model “{model['alias']}”.")


ROUTES = [
    Route("/models", models_page, methods=["GET"]),
    Route("/models", create, methods=["POST"]),
    Route("/models/{alias:path}/delete", confirm_delete, methods=["GET"]),
    Route("/models/{alias:path}/delete", delete, methods=["POST"]),
    Route("/models/{alias:path}", model_page, methods=["GET"]),
    Route("/models/{alias:path}", update, methods=["POST"]),
]
