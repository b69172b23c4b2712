"""The Ollama API surface (``/`` and ``/api/*``), proxied to the upstream.

Every JSON endpoint checks its body first (so bad input never reaches the upstream), then
forwards the client's bytes unchanged. ``/api/chat`` goes through the chat pipeline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from proxy.core.errors import Conflict
from proxy.core.payloads import parse_object, read_body, require_fields, require_model
from proxy.core.responses import json_bytes
from proxy.gateway.forward import forward, forward_small
from proxy.gateway.grounding import knowledge_model
from proxy.gateway.model_lists import STALE, upstream_models, with_models
from proxy.gateway.relay import whole_response
from proxy.gateway.renaming import rename_reply

Handler = Callable[[Request], Awaitable[Response | ASGIApp]]


async def root(request: Request) -> Response:
    return PlainTextResponse("Ollama is running")


async def discovery(request: Request) -> Response:
    """/api/version: the upstream's answer, with the short discovery deadline."""
    return await forward_small(request)


async def running(request: Request) -> Response:
    """/api/ps: the upstream's loaded models; a knowledge model is loaded when its base model is."""
    response = await forward_small(request)
    if response.status_code != 200 or request.method != "GET":
        return response
    return _with_body(response, with_models(bytes(response.body), request, listing="models", key="name",
                                            rename=("name", "model")))


def _with_body(response: Response, body: bytes) -> Response:
    if body is not response.body:
        response.body = body
        response.headers["content-length"] = str(len(body))
    return response


async def tags(request: Request) -> Response:
    """The upstream's model list; its last good copy (marked ``X-GraphGate-Stale: 1``) when the
    upstream is down or slow, so that model pickers keep their models (Open WebUI gives up after 10
    s) and a chat then says why it cannot be answered. /v1/models is made from the same list."""
    listed = await upstream_models(request, request.method)
    if listed.response is not None and (listed.response.status_code != 200 or request.method != "GET"):
        return whole_response(listed.response, listed.body)
    body = with_models(listed.body, request, listing="models", key="name", rename=("name", "model"))
    if listed.response is None:
        return Response(body, 200, headers={"content-type": listed.content_type, STALE: "1"})
    return whole_response(listed.response, body)


def json_endpoint(*, legacy_name: bool = False, fields: tuple[str, ...] = (),
                  needs_model: bool = True, discovery_call: bool = False, models: bool = False,
                  makes: str | None = None) -> Handler:
    """A handler that checks the JSON body and forwards it unchanged; ``models``: a knowledge
    model's name is sent as its base model's (embeddings, completions, /api/show) and the reply
    renamed back; ``makes``: the body's field naming a model the call makes upstream (pull, create,
    copy), which may not be a knowledge model's name (it would hide the one or the other)."""

    async def handler(request: Request) -> Response | ASGIApp:
        raw = await read_body(request, request.app.state.gateway.settings.max_body_bytes)
        body = parse_object(raw)
        if needs_model:
            require_model(body, legacy_name=legacy_name)
        require_fields(body, *fields)
        if makes is not None:
            refuse_knowledge_model_name(request, body.get(makes) or body.get("name"))
        found, name_field = None, "model" if "model" in body or not legacy_name else "name"
        if models:
            name = str(body[name_field])
            found = knowledge_model(request, name)
            if found is not None:   # the name alone: a knowledge model's system prompt is for chats
                raw = json_bytes({**body, name_field: found.model})
        response = (await forward_small(request, content=raw) if discovery_call
                    else await forward(request, content=raw))
        return rename_reply(response, found.model, name) if found is not None else response

    return handler


def refuse_knowledge_model_name(request: Request, name: object) -> None:
    registry = request.app.state.gateway.models
    taken = registry.claims(name) if registry is not None and isinstance(name, str) else None
    if taken is not None:
        raise Conflict(f"{name!r} is the name of a knowledge model (GET /rag/models): delete it, or give the "
                       "upstream model another name")


async def generate(request: Request) -> Response | ASGIApp:
    """A completion: a flavour of the chat pipeline (proxy/gateway/chat.py)."""
    return await request.app.state.gateway.chat.handle(request, "generate")


async def chat(request: Request) -> Response | ASGIApp:
    return await request.app.state.gateway.chat.handle(request, "ollama")


async def blobs(request: Request) -> Response | ASGIApp:
    """Blobs are model files (gigabytes): streamed through, exempt from the body limit."""
    content = request.stream() if request.method == "POST" else None
    return await forward(request, content=content)


ROUTES = [
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/api/version", discovery, methods=["GET", "HEAD"]),
    Route("/api/tags", tags, methods=["GET", "HEAD"]),
    Route("/api/ps", running, methods=["GET", "HEAD"]),
    Route("/api/show", json_endpoint(legacy_name=True, discovery_call=True, models=True), methods=["POST"]),
    Route("/api/chat", chat, methods=["POST"]),
    Route("/api/generate", generate, methods=["POST"]),
    Route("/api/embed", json_endpoint(models=True), methods=["POST"]),
    Route("/api/embeddings", json_endpoint(models=True), methods=["POST"]),
    Route("/api/pull", json_endpoint(legacy_name=True, makes="model"), methods=["POST"]),
    Route("/api/push", json_endpoint(legacy_name=True), methods=["POST"]),
    Route("/api/create", json_endpoint(legacy_name=True, makes="model"), methods=["POST"]),
    Route("/api/copy", json_endpoint(needs_model=False, fields=("source", "destination"), makes="destination"),
          methods=["POST"]),
    Route("/api/delete", json_endpoint(legacy_name=True), methods=["DELETE"]),
    Route("/api/blobs/{digest}", blobs, methods=["HEAD", "POST"]),
]
