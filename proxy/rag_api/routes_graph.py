"""``/rag/entities``, ``/rag/relations``, ``/rag/merge`` and ``/rag/aliases``: the console's graph curation as JSON,
for scripts and tests. Entities are named by their name (case-insensitive), relations by their
two endpoint names."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import BadRequest
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.extraction.results import name_key
from proxy.knowledge.graph import GraphService
from proxy.state import access_settings, knowledge
from proxy.store.changes import pair_key


async def graph(request: Request) -> GraphService:
    return (await knowledge(request)).graph


async def _body(request: Request) -> dict[str, Any]:
    return parse_object(await read_body(request, access_settings(request).max_body_bytes))


async def get_entity(request: Request) -> Response:
    """The entity; a name merged away answers its target (200, ``resolved_from`` naming the alias),
    as chat retrieval and re-ingestion resolve it, rather than a redirect that curl and httpx do not
    follow by default."""
    key = name_key(request.path_params["name"])
    target = await (await graph(request)).merged_into(key)
    if target is None:
        return json_response(await (await graph(request)).entity(key))
    return json_response({**await (await graph(request)).entity(target), "resolved_from": request.path_params["name"]})


async def edit_entity(request: Request) -> Response:
    body = await _body(request)
    unknown = set(body) - {"name", "type", "description"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))} (name, type, description can be changed)")
    result = await (await graph(request)).edit_entity(name_key(request.path_params["name"]), **body)
    return json_response(await (await graph(request)).entity(result["target"]))


async def delete_entity(request: Request) -> Response:
    return json_response(await (await graph(request)).delete_entity(name_key(request.path_params["name"])))


def _pair(body: dict[str, Any]) -> str:
    source, target = body.get("source"), body.get("target")
    if not isinstance(source, str) or not isinstance(target, str):
        raise BadRequest('name the relation by its endpoints: {"source": "...", "target": "..."}')
    return pair_key(name_key(source), name_key(target))


async def edit_relation(request: Request) -> Response:
    body = await _body(request)
    changes = {k: body[k] for k in ("keywords", "description", "weight") if k in body}
    return json_response(await (await graph(request)).edit_relation(_pair(body), **changes))


async def delete_relation(request: Request) -> Response:
    return json_response(await (await graph(request)).delete_relation(_pair(await _body(request))))


async def merge(request: Request) -> Response:
    """``{"entities": [...], "target": "name", "type"?, "description"?, "dry_run"?}``."""
    body = await _body(request)
    names = body.get("entities")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest('"entities" must be a list of entity names')
    target = body.get("target")
    keys = [name_key(n) for n in names]
    service = await graph(request)
    if body.get("dry_run"):
        plan = await service.plan_merge(keys, target, type=body.get("type"), description=body.get("description"))
        return json_response({"target": plan.target_name, "type": plan.type, "description": plan.description,
                              "merged": plan.merged_names, "relations": plan.relations,
                              "self_loops_dropped": len(plan.self_loops), "relations_combined": plan.combined})
    return json_response(await service.merge(keys, target, type=body.get("type"), description=body.get("description")))


async def undo_alias(request: Request) -> Response:
    """Undo an alias (entity resolution's or a merge's): the name becomes its own entity again."""
    return json_response(await (await graph(request)).undo_resolution(name_key(request.path_params["name"])))


ROUTES = [
    Route("/rag/entities/{name:path}", get_entity, methods=["GET"]),
    Route("/rag/entities/{name:path}", edit_entity, methods=["PATCH"]),
    Route("/rag/entities/{name:path}", delete_entity, methods=["DELETE"]),
    Route("/rag/relations", edit_relation, methods=["PATCH"]),
    Route("/rag/relations", delete_relation, methods=["DELETE"]),
    Route("/rag/merge", merge, methods=["POST"]),
    Route("/rag/aliases/{name:path}", undo_alias, methods=["DELETE"]),
]
