"""Ollama's OpenAI-compatible surface (``/v1/*``), proxied to the upstream.

Errors here use the OpenAI error object; ``/v1/chat/completions`` shares the chat pipeline.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from proxy.gateway.forward import forward_small
from proxy.gateway.routes_ollama import json_endpoint


async def chat_completions(request: Request) -> Response | ASGIApp:
    return await request.app.state.gateway.chat.handle(request, "openai")


async def models(request: Request) -> Response:
    return await forward_small(request)


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", json_endpoint(), methods=["POST"]),
    Route("/v1/embeddings", json_endpoint(), methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/models/{model:path}", models, methods=["GET"]),
]
