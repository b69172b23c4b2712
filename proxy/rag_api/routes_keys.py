"""``/rag/keys``: the stored API keys (proxy/control/keys.py): list, create (the token is in the
answer, once), revoke. All need an admin key that is not limited to some knowledge bases (or a
console login, or GRAPHGATE_API_KEY)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import BadRequest
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.guards.access import require_unrestricted
from proxy.state import access_settings, bases, key_store


async def list_keys(request: Request) -> Response:
    require_unrestricted(request, "listing API keys")
    return json_response({"keys": key_store(request).describe()})


async def create_key(request: Request) -> Response:
    require_unrestricted(request, "creating an API key")
    body = parse_object(await read_body(request, access_settings(request).max_body_bytes))
    unknown = sorted(set(body) - {"name", "role", "kbs"})
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}: a key has name, role and kbs")
    key, token = await key_store(request).create(body.get("name"), body.get("role"), body.get("kbs"),
                                                 bases(request).names())
    return json_response({**key.describe(), "token": token}, 201)


async def revoke_key(request: Request) -> Response:
    require_unrestricted(request, "revoking an API key")
    key = await key_store(request).revoke(request.path_params["id"])
    return json_response({"revoked": key.id, "name": key.name})


ROUTES = [
    Route("/rag/keys", list_keys, methods=["GET"]),
    Route("/rag/keys", create_key, methods=["POST"]),
    Route("/rag/keys/{id}", revoke_key, methods=["DELETE"]),
]
