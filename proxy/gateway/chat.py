"""The chat pipeline shared by ``/api/chat``, ``/v1/chat/completions`` and ``/api/generate``.

    read + check body -> ChatTurn -> stages, in order -> forward -> relay

A completion (``/api/generate``) is a turn of the ``generate`` flavour: its messages are its
``system`` and ``prompt`` (none for a raw prompt or a model load), and messages rewritten by a
stage are written back into those two fields.

A stage is an async callable that receives the turn and returns it (changed or not), or
returns a finished response to answer the client itself. Stages are where a turn's messages
may be rewritten before forwarding; a turn no stage changed reaches the upstream byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from proxy.core.payloads import parse_object, read_body, require_model
from proxy.core.responses import json_bytes
from proxy.gateway.forward import forward
from proxy.gateway.relay import StreamRelay
from proxy.gateway.renaming import rename_reply

if TYPE_CHECKING:
    from proxy.control.models import KnowledgeModel
    from proxy.knowledge.service import Knowledge

Flavour = Literal["ollama", "openai", "generate"]


@dataclass
class Grounding:
    """Where a request's retrieval comes from: ``knowledge`` (None: not grounded, ``reason`` says why)."""

    kb: str | None
    knowledge: Knowledge | None = None
    reason: str | None = None
    mode: str | None = None                 # the knowledge model's mode, if it has one
    model: KnowledgeModel | None = None


@dataclass
class ChatTurn:
    flavour: Flavour
    path: str
    headers: Headers
    body: dict[str, Any]
    raw: bytes
    request: Request
    changed: bool = False
    client_model: str = field(init=False)   # the model the client named (a knowledge model's name, say)
    grounding: Grounding | None = None       # where its retrieval comes from (the grounding stage sets it)

    def __post_init__(self) -> None:
        self.client_model = str(self.body["model"])

    @property
    def kb(self) -> str:
        """The knowledge base the turn is counted under (``default`` for one no stage grounded)."""
        return (self.grounding.kb if self.grounding is not None else None) or "default"

    @property
    def model(self) -> str:
        """The model the turn is forwarded to."""
        return str(self.body["model"])

    @property
    def messages(self) -> list[dict[str, Any]]:
        if self.flavour == "generate":
            return completion_messages(self.body)
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def streaming(self) -> bool:
        # Ollama streams unless told not to; the OpenAI API only when asked
        default = self.flavour != "openai"
        return bool(self.body.get("stream", default))

    def with_messages(self, messages: list[dict[str, Any]]) -> ChatTurn:
        if self.flavour == "generate":   # the question is the prompt; a system message, the system field
            body = {**self.body, "prompt": messages[-1]["content"]}
            if messages[0].get("role") == "system":
                body["system"] = messages[0]["content"]
            self.body = body
        else:
            self.body = {**self.body, "messages": messages}
        self.changed = True
        return self

    def payload(self) -> bytes:
        return json_bytes(self.body) if self.changed else self.raw


def completion_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A completion's prompt as a chat's messages (its ``system`` first); none for a raw prompt
    or a model load (no prompt), which are forwarded as they are."""
    prompt = body.get("prompt")
    if body.get("raw") or not isinstance(prompt, str) or not prompt.strip():
        return []
    messages = [{"role": "user", "content": prompt}]
    if isinstance(body.get("system"), str) and body["system"]:
        messages.insert(0, {"role": "system", "content": body["system"]})
    return messages


Stage = Callable[[ChatTurn], Awaitable["ChatTurn | Response | ASGIApp"]]


class ChatPipeline:
    def __init__(self, stages: Sequence[Stage] = ()) -> None:
        self.stages = list(stages)

    async def handle(self, request: Request, flavour: Flavour) -> Response | ASGIApp:
        started = time.perf_counter()
        gateway = request.app.state.gateway
        raw = await read_body(request, gateway.settings.max_body_bytes)
        body = parse_object(raw)
        require_model(body)
        turn = ChatTurn(flavour, request.url.path, request.headers, body, raw, request)
        for stage in self.stages:
            result = await stage(turn)
            if not isinstance(result, ChatTurn):
                return rename_reply(result, turn.model, turn.client_model)
            turn = result
        payload = turn.payload()
        gateway.metrics.chat_forwarded(started)
        with gateway.metrics.upstream_call("chat_relay", turn.kb) as call:
            response = await forward(request, content=payload)
            call.status = response.response.status_code if isinstance(response, StreamRelay) else response.status_code
        return rename_reply(response, turn.model, turn.client_model)
