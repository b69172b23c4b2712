"""``/rag/models``: the knowledge models (proxy/control/models.py): list, describe,
create or replace, delete. A key sees and manages only the models of its knowledge bases
(managing one needs the admin role on its base)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.actions.models import refresh_upstream_names, registry, save_model, visible_model
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.guards.access import principal, require
from proxy.state import access_settings


async def list_models(request: Request) -> Response:
    await refresh_upstream_names(request)
    who = principal(request)
    return json_response({"models": registry(request).list(None if who.kbs is None else who.kbs)})


async def get_model(request: Request) -> Response:
    alias = request.path_params["alias"]
    visible_model(request, alias)
    await refresh_upstream_names(request)
    return json_response(registry(request).get(alias))


async def put_model(request: Request) -> Response:
    spec = parse_object(await read_body(request, access_settings(request).max_body_bytes))
    described, created = await save_model(request, request.path_params["alias"], spec)
    return json_response(described, 201 if created else 200)


async def delete_model(request: Request) -> Response:
    alias = request.path_params["alias"]
    require(request, visible_model(request, alias).kb, "admin")
    return json_response(await registry(request).delete(alias))


ROUTES = [
    Route("/rag/models", list_models, methods=["GET"]),
    Route("/rag/models/{alias:path}", get_model, methods=["GET"]),
    Route("/rag/models/{alias:path}", put_model, methods=["PUT"]),
    Route("/rag/models/{alias:path}", delete_model, methods=["DELETE"]),
]
