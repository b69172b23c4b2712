"""Knowledge models managed through a request (the /rag API's and the console's): who may see and
change which, and the checks a new name passes against the upstream's own models."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from proxy.control.models import KnowledgeModel, KnowledgeModels, canonical, model_key
from proxy.core.errors import Conflict, Forbidden, GraphGateError, NotFound, ServiceUnavailable
from proxy.gateway.model_lists import remember_upstream_names
from proxy.guards.access import principal, require
from proxy.state import bases, chat_settings


def registry(request: Request) -> KnowledgeModels:
    models: KnowledgeModels | None = request.app.state.gateway.models
    if models is None:
        raise ServiceUnavailable("the knowledge models are unavailable")
    return models


async def refresh_upstream_names(request: Request) -> None:
    """Read the upstream's model list now (``base_model_present``); the last one kept if it cannot."""
    gateway = request.app.state.gateway
    deadline = chat_settings(request).discovery_timeout
    try:
        response, body = await gateway.upstream.fetch("GET", "/api/tags", deadline=deadline)
    except GraphGateError:
        return
    if response.status_code == 200:
        remember_upstream_names(gateway, body)


def visible_model(request: Request, alias: str) -> KnowledgeModel:
    """The knowledge model, when the request's key may see its base (404 as for an unknown name otherwise)."""
    found = registry(request).resolve(alias)
    if found is None or not principal(request).sees(found.kb):
        raise NotFound(f"no knowledge model named {alias!r}")
    return found


async def save_model(request: Request, alias: str, spec: dict[str, Any], *,
                     replace: bool = True) -> tuple[dict[str, Any], bool]:
    """Store a knowledge model with the checks of every way of doing it (this API, the console):
    the admin role on its base and on the base of the model it replaces; a name the upstream has is
    a 409, and so is a name taken when ``replace`` is off. (Its description, whether it is new.)"""
    models = registry(request)
    require_model_admin(request, spec.get("kb", "default"))
    current = models.claims(alias) if alias else None
    if current is not None:
        if not principal(request).sees(current.kb):
            raise Conflict(f"the name {alias!r} is taken: choose another")
        if not replace or current.alias != canonical(alias):
            raise Conflict(f"a knowledge model named {current.alias!r} already exists: edit it on its page")
        require(request, current.kb, "admin")
    await refresh_upstream_names(request)
    if models.upstream_models is None:
        raise ServiceUnavailable("the upstream's model list cannot be read, so the name cannot be checked against "
                                 "its models: try again when the upstream answers")
    if alias and model_key(alias) in models.upstream_keys:
        raise Conflict(f"the upstream has a model named {alias!r}: choose another name for the knowledge model")
    return await models.put(alias, spec, bases(request).names())


def require_model_admin(request: Request, kb: Any) -> None:
    """The role first, whatever the body: a key that may not make models learns nothing of their
    names (a taken name is a 409). ``kb`` not a base's name (a 400 later): the admin role of the key."""
    if isinstance(kb, str):
        require(request, kb, "admin")
        return
    who = principal(request)
    if who.role != "admin":
        raise Forbidden(f"forbidden: key {who.name!r} may {who.role} knowledge bases, not manage knowledge models")
