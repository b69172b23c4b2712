"""The upstream's model lists with the knowledge models added, as the request's key may see them.

A knowledge model is listed as its base model is (details, size, digest, capabilities, context
length), under its own name; one whose base model the upstream does not list is left out of the
lists (a client could not chat with it) and shown as missing by ``GET /rag/models`` and the console.
A key limited to some knowledge bases sees the knowledge models of those bases, and the plain
models unless GRAPHGATE_SCOPED_KEYS_SEE_PLAIN_MODELS hides them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.core import json_text
from proxy.core.responses import json_bytes
from proxy.gateway.grounding import plain_models_visible
from proxy.gateway.knowledge_models import KnowledgeModel, canonical
from proxy.guards.access import principal

if TYPE_CHECKING:
    from starlette.requests import Request


def visible_models(request: Request) -> tuple[list[KnowledgeModel], bool]:
    """The knowledge models the request's key may see, and whether it may see the plain models."""
    gateway = request.app.state.gateway
    who = principal(request)
    registry = gateway.models
    models = [m for m in registry.models.values() if not registry.shadowed(m)] if registry is not None else []
    return [m for m in models if who.sees(m.kb)], plain_models_visible(gateway, who)


def _by_name(entries: list[Any], key: str) -> dict[str, dict[str, Any]]:
    return {canonical(str(e.get(key))): e for e in entries if isinstance(e, dict) and isinstance(e.get(key), str)}


def with_models(body: bytes, request: Request, *, listing: str, key: str,
                rename: tuple[str, ...]) -> bytes:
    """An upstream list answer (``body``: JSON whose ``listing`` holds entries named by ``key``)
    with the visible knowledge models added after the plain ones (each a copy of its base model's
    entry with the fields ``rename`` set to its name). The bytes are returned as they are when
    nothing changes (no knowledge model, every plain model visible)."""
    models, plain = visible_models(request)
    if not models and plain:
        return body
    try:
        data = _read(request.app.state.gateway, body, request.url.path)
    except ValueError:
        return body
    entries = data.get(listing) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return body
    bases = _by_name(entries, key)
    added = []
    for model in models:
        base = bases.get(canonical(model.model))
        if base is not None:
            added.append({**base, **{field: _listed_name(model, base, key) for field in rename}})
    data[listing] = (entries if plain else []) + added
    return json_bytes(data)


def _read(gateway: Any, body: bytes, path: str) -> Any:
    """An upstream model list's JSON; a ValueError when it is not JSON (the bytes are then relayed
    as sent), a 502 naming the reason when it nests deeper than any model list (GraphGate cannot
    read it, and what it would relay no client could either)."""
    try:
        return json_text.loads(body)   # a model list nests 5 levels: FIELD_DEPTH is ample
    except json_text.JSONTooDeep as exc:
        raise gateway.upstream.wrong_shape(path, f"it is {exc}") from None


def _listed_name(model: KnowledgeModel, base: dict[str, Any], key: str) -> str:
    """The alias as the list names models: with its tag, unless the list drops ``:latest`` (/v1)."""
    shown = str(base.get(key, ""))
    if shown and ":" not in shown.rsplit("/", 1)[-1] and model.alias.endswith(":latest"):
        return model.alias[: -len(":latest")]
    return model.alias


def remember_upstream_names(gateway: Any, body: bytes) -> None:
    """Keep the names of a fresh /api/tags answer (``base_model_present`` in /rag/models)."""
    if gateway.models is None:
        return
    try:
        entries = _read(gateway, body, "/api/tags").get("models")
    except (ValueError, AttributeError):
        return
    if isinstance(entries, list):
        names = tuple(str(e.get("name")) for e in entries if isinstance(e, dict) and e.get("name"))
        gateway.models.note_upstream(names)
