"""Ollama's OpenAI-compatible surface (``/v1/*``), proxied to the upstream.

Errors here use the OpenAI error object; ``/v1/chat/completions`` shares the chat pipeline.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from proxy.core.errors import UpstreamError
from proxy.core.responses import json_bytes
from proxy.gateway.forward import forward_small, upstream_headers
from proxy.gateway.grounding import knowledge_model
from proxy.gateway.model_lists import STALE, openai_list, saved_entry, upstream_models, with_models
from proxy.gateway.relay import whole_response
from proxy.gateway.renaming import rename_reply
from proxy.gateway.routes_ollama import json_endpoint


async def chat_completions(request: Request) -> Response | ASGIApp:
    return await request.app.state.gateway.chat.handle(request, "openai")


async def models(request: Request) -> Response:
    """The upstream's model list in OpenAI's shape, made from its /api/tags as Ollama makes it (the
    same list /api/tags answers, its saved copy included while the upstream is down), with the
    knowledge models the key may see."""
    gateway = request.app.state.gateway
    listed = await upstream_models(request)
    if listed.response is not None and listed.response.status_code != 200:
        return whole_response(listed.response, listed.body)
    body = with_models(json_bytes(openai_list(gateway, listed.body)), request, listing="data", key="id",
                       rename=("id",))
    return Response(body, 200, media_type="application/json", headers={STALE: "1"} if listed.stale else None)


async def model(request: Request) -> Response:
    """/v1/models/{model}: a knowledge model is described as its base model, under its own name;
    while the upstream cannot answer, the saved list's entry (as /v1/models lists it)."""
    name = request.path_params["model"]
    found = knowledge_model(request, name)
    gateway = request.app.state.gateway
    try:
        if found is None:
            return await forward_small(request)
        upstream, body = await gateway.upstream.fetch("GET", f"/v1/models/{found.model}",
                                                      headers=upstream_headers(request),
                                                      deadline=gateway.settings.discovery_timeout)
    except UpstreamError:
        entry = saved_entry(gateway, found.model if found is not None else name)
        if entry is None:
            raise
        return Response(json_bytes({**entry, "id": name}), 200, media_type="application/json", headers={STALE: "1"})
    return rename_reply(whole_response(upstream, body), found.model, name, field="id")


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", json_endpoint(models=True), methods=["POST"]),
    Route("/v1/embeddings", json_endpoint(models=True), methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/models/{model:path}", model, methods=["GET"]),
]
