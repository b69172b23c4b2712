"""The upstream's model lists with the knowledge models added, as the request's key may see them.

A knowledge model is listed as its base model is (details, size, digest, capabilities, context
length), under its own name; one whose base model the upstream does not list is left out of the
lists (a client could not chat with it) and shown as missing by ``GET /rag/models`` and the console.
A key limited to some knowledge bases sees the knowledge models of those bases, and the plain
models unless GRAPHGATE_SCOPED_KEYS_SEE_PLAIN_MODELS hides them.

Both lists (``/api/tags`` and ``/v1/models``) are made from one source, the upstream's /api/tags,
as Ollama makes its own /v1/models: they name the same models at every moment. While the upstream
is down or slow, both answer its last good list, marked ``X-GraphGate-Stale: 1`` (and
``/v1/models/{model}`` that list's entry): a model picker keeps its models, and a chat then gets
the 502 that says the upstream cannot be reached. What only a running upstream can say (``/api/ps``,
``/api/show``) answers that 502 itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from proxy.control.models import KnowledgeModel, canonical
from proxy.core import json_text
from proxy.core.errors import UpstreamError
from proxy.core.responses import json_bytes
from proxy.gateway.forward import upstream_headers
from proxy.gateway.grounding import plain_models_visible
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


# --- the one source of the model lists: the upstream's /api/tags, or its last good copy ----------

STALE = "x-graphgate-stale"   # on a list answered from the saved copy


@dataclass
class Listed:
    """The upstream's /api/tags answer (``response``), or its saved copy (``response`` None: the
    upstream cannot be reached or is late)."""
    response: httpx.Response | None
    body: bytes
    content_type: str

    @property
    def stale(self) -> bool:
        return self.response is None


async def upstream_models(request: Request, method: str = "GET") -> Listed:
    """The upstream's model list, kept as the last good copy; while the upstream cannot be reached
    or answers later than GRAPHGATE_DISCOVERY_TIMEOUT, that copy (an UpstreamError when there is
    none yet). /api/tags and /v1/models are both made from it, so that they always agree."""
    gateway = request.app.state.gateway
    try:
        response, body = await gateway.upstream.fetch(method, "/api/tags", headers=upstream_headers(request),
                                                      deadline=gateway.settings.discovery_timeout)
    except UpstreamError:
        if gateway.tags_cache is None:
            raise
        body, headers = gateway.tags_cache
        return Listed(None, body, headers.get("content-type", "application/json"))
    content_type = response.headers.get("content-type", "application/json")
    if response.status_code == 200 and method == "GET":
        gateway.tags_cache = (body, {"content-type": content_type})
        remember_upstream_names(gateway, body)
    return Listed(response, body, content_type)


def openai_list(gateway: Any, tags: bytes) -> dict[str, Any]:
    """/api/tags in OpenAI's shape, as Ollama makes its own /v1/models from it."""
    entries = _read(gateway, tags, "/api/tags")
    models = entries.get("models") if isinstance(entries, dict) else None
    if not isinstance(models, list):
        raise gateway.upstream.wrong_shape("/api/tags", "it has no model list")
    return {"object": "list", "data": [openai_entry(m) for m in models
                                       if isinstance(m, dict) and isinstance(m.get("name"), str)]}


def openai_entry(model: dict[str, Any]) -> dict[str, Any]:
    """One model as Ollama's /v1/models lists it: created from ``modified_at``, owned by the name's
    namespace (``library`` for Ollama's own)."""
    name = str(model["name"])
    parts = name.split(":", 1)[0].split("/")
    return {"id": name, "object": "model", "created": _unix(model.get("modified_at")),
            "owned_by": parts[-2] if len(parts) > 1 else "library"}


def saved_entry(gateway: Any, name: str) -> dict[str, Any] | None:
    """The saved list's entry for ``name`` in OpenAI's shape (for /v1/models/{model} while the
    upstream cannot answer), or None."""
    if gateway.tags_cache is None:
        return None
    try:
        listed = openai_list(gateway, gateway.tags_cache[0])["data"]
    except (ValueError, UpstreamError):
        return None
    return next((entry for entry in listed if canonical(entry["id"]) == canonical(name)), None)


def _unix(stamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0
