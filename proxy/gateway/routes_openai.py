"""Ollama's OpenAI-compatible surface (``/v1/*``), proxied to the upstream.

Errors here use the OpenAI error object; ``/v1/chat/completions`` shares the chat pipeline.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from proxy.gateway.forward import forward_small, upstream_headers
from proxy.gateway.grounding import knowledge_model
from proxy.gateway.model_lists import with_models
from proxy.gateway.relay import whole_response
from proxy.gateway.renaming import rename_reply
from proxy.gateway.routes_ollama import json_endpoint


async def chat_completions(request: Request) -> Response | ASGIApp:
    return await request.app.state.gateway.chat.handle(request, "openai")


async def models(request: Request) -> Response:
    """The upstream's /v1/models with the knowledge models the key may see."""
    response = await forward_small(request)
    if response.status_code == 200:
        body = with_models(bytes(response.body), request, listing="data", key="id", rename=("id",))
        if body is not response.body:
            response.body = body
            response.headers["content-length"] = str(len(body))
    return response


async def model(request: Request) -> Response:
    """/v1/models/{model}: a knowledge model is described as its base model, under its own name."""
    name = request.path_params["model"]
    found = knowledge_model(request, name)
    if found is None:
        return await forward_small(request)
    gateway = request.app.state.gateway
    upstream, body = await gateway.upstream.fetch("GET", f"/v1/models/{found.model}", headers=upstream_headers(request),
                                                  deadline=gateway.settings.discovery_timeout)
    return rename_reply(whole_response(upstream, body), found.model, name, field="id")


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", json_endpoint(models=True), methods=["POST"]),
    Route("/v1/embeddings", json_endpoint(models=True), methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/models/{model:path}", model, methods=["GET"]),
]
