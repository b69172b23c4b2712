"""``/rag/kbs``: the knowledge bases (proxy/knowledge/bases.py): list, create, describe one (with its
settings overrides and the values it runs with), change its overrides, delete it with its data.

A key limited to some bases lists only those, deletes only those it is an admin of, and creates
none (proxy/guards/access.py). The other /rag routes pick a base with ``?kb=<name>`` or the
``X-GraphGate-KB`` header (proxy/state.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import BadRequest
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.guards.access import principal, require, require_unrestricted
from proxy.state import access_settings, bases, delete_base


async def list_bases(request: Request) -> Response:
    """The bases the request's key may see (a scoped key never learns the others' names)."""
    who = principal(request)
    registry = bases(request)
    registry.check_list()   # an unreadable list: 503 with the reason, not "default" alone
    return json_response({"kbs": [base for base in registry.describe() if who.sees(base["name"])]})


async def create_base(request: Request) -> Response:
    require_unrestricted(request, "creating a knowledge base")
    body = parse_object(await read_body(request, access_settings(request).max_body_bytes))
    name = body.get("name")
    if not isinstance(name, str):
        raise BadRequest("name is required: the knowledge base's name")
    settings = body.get("settings") or {}
    if not isinstance(settings, dict):
        raise BadRequest("settings must be an object")
    registry = bases(request)
    await registry.create(name, settings)
    return json_response(registry.detail(name), 201)


async def describe_base(request: Request) -> Response:
    require(request, request.path_params["name"], "read")
    return json_response(bases(request).detail(request.path_params["name"]))


async def change_base(request: Request) -> Response:
    """``{"settings": {"chunk_tokens": 600, "language": null}}``: set or (null) remove overrides."""
    require(request, request.path_params["name"], "admin")
    body = parse_object(await read_body(request, access_settings(request).max_body_bytes))
    unknown = sorted(set(body) - {"settings"})
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(map(repr, unknown))}: only settings can be changed")
    if "settings" not in body:
        raise BadRequest("settings is required: the overrides to set (a null removes one)")
    return json_response(await bases(request).update(request.path_params["name"], body["settings"]))


async def remove_base(request: Request) -> Response:
    name = request.path_params["name"]
    require(request, name, "admin")
    if request.query_params.get("confirm") != name:
        raise BadRequest(f"deleting a knowledge base removes its documents and graph: confirm with ?confirm={name}")
    return json_response(await delete_base(request, name))


ROUTES = [
    Route("/rag/kbs", list_bases, methods=["GET"]),
    Route("/rag/kbs", create_base, methods=["POST"]),
    Route("/rag/kbs/{name}", describe_base, methods=["GET"]),
    Route("/rag/kbs/{name}", change_base, methods=["PATCH"]),
    Route("/rag/kbs/{name}", remove_base, methods=["DELETE"]),
]
