"""The Ollama API surface (``/`` and ``/api/*``), proxied to the upstream.

Every JSON endpoint checks its body first (so bad input never reaches the upstream), then
forwards the client's bytes unchanged. ``/api/chat`` goes through the chat pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from proxy.core.errors import UpstreamError
from proxy.core.payloads import parse_object, read_body, require_fields, require_model
from proxy.core.responses import json_bytes
from proxy.gateway.forward import forward, forward_small, upstream_headers
from proxy.gateway.grounding import apply_model, ground, knowledge_model
from proxy.gateway.model_lists import remember_upstream_names, with_models
from proxy.gateway.relay import StreamRelay, whole_response
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
    """The upstream's model list; its last good copy when the upstream is slow or down, so that
    Open WebUI (10 s timeout) keeps its models rather than marking the connection dead."""
    gateway = request.app.state.gateway
    try:
        response, body = await gateway.upstream.fetch(request.method, "/api/tags",
                                                      headers=upstream_headers(request),
                                                      deadline=gateway.settings.discovery_timeout)
    except UpstreamError:
        if gateway.tags_cache is None:
            raise
        body, headers = gateway.tags_cache
        listed = with_models(body, request, listing="models", key="name", rename=("name", "model"))
        return Response(listed, 200, headers={**headers, "x-graphgate-stale": "1"})
    if response.status_code == 200 and request.method == "GET":
        gateway.tags_cache = (body, {"content-type": response.headers.get("content-type", "application/json")})
        remember_upstream_names(gateway, body)
        body = with_models(body, request, listing="models", key="name", rename=("name", "model"))
    return whole_response(response, body)


def json_endpoint(*, legacy_name: bool = False, fields: tuple[str, ...] = (),
                  needs_model: bool = True, discovery_call: bool = False, models: bool = False) -> Handler:
    """A handler that checks the JSON body and forwards it unchanged; ``models``: a knowledge
    model's name is sent as its base model's (embeddings, completions, /api/show) and the reply
    renamed back."""

    async def handler(request: Request) -> Response | ASGIApp:
        raw = await read_body(request, request.app.state.gateway.settings.max_body_bytes)
        body = parse_object(raw)
        if needs_model:
            require_model(body, legacy_name=legacy_name)
        require_fields(body, *fields)
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


async def generate(request: Request) -> Response | ASGIApp:
    started = time.perf_counter()
    gateway = request.app.state.gateway
    raw = await read_body(request, gateway.settings.max_body_bytes)
    body = parse_object(raw)
    require_model(body)
    name = str(body["model"])
    found = knowledge_model(request, name)
    if found is not None:
        body = apply_model(body, found, system_field=True)
        raw = json_bytes(body)
    kb = found.kb if found is not None else gateway.settings.plain_model_kb
    kb = "default" if kb == "none" else kb   # an ungrounded completion is counted under default
    if gateway.settings.augment_generate:
        raw = await gateway.augmenter.generate(request, body, raw, await ground(request, found))
    gateway.metrics.chat_forwarded(started)
    with gateway.metrics.upstream_call("chat_relay", kb) as call:   # a completion relayed like a chat
        response = await forward(request, content=raw)
        call.status = response.response.status_code if isinstance(response, StreamRelay) else response.status_code
    return rename_reply(response, found.model, name) if found is not None else response


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
    Route("/api/pull", json_endpoint(legacy_name=True), methods=["POST"]),
    Route("/api/push", json_endpoint(legacy_name=True), methods=["POST"]),
    Route("/api/create", json_endpoint(legacy_name=True), methods=["POST"]),
    Route("/api/copy", json_endpoint(needs_model=False, fields=("source", "destination")), methods=["POST"]),
    Route("/api/delete", json_endpoint(legacy_name=True), methods=["DELETE"]),
    Route("/api/blobs/{digest}", blobs, methods=["HEAD", "POST"]),
]
