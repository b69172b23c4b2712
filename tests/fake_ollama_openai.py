"""The OpenAI-compatible part (/v1) of the fake Ollama server in fake_ollama.py.

A mixin of ``FakeOllama``: it reuses the fake's request parsing, special model
names, reply script and streaming, and answers in OpenAI shapes (SSE streams,
``{"error": {"message", "type", "param", "code"}}`` errors).
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

SSE_DONE = b"data: [DONE]\n\n"


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _unix(rfc3339: str) -> int:
    try:
        return int(datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return int(time.time())


def _openai_tool_call(call: dict) -> dict:
    function = call["function"]
    return {"id": call["id"], "index": function["index"], "type": "function",
            "function": {"name": function["name"], "arguments": json.dumps(function["arguments"])}}


def _response_format(req: dict) -> Any:
    """OpenAI response_format -> Ollama format ("json", a schema, or None)."""
    rf = req.get("response_format")
    if not isinstance(rf, dict):
        return None
    if rf.get("type") == "json_object":
        return "json"
    if rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else "json"
    return None


def _reasoning(req: dict) -> Any:
    """reasoning_effort / reasoning.effort -> Ollama think (a level, False, or None)."""
    effort = req.get("reasoning_effort")
    if effort is None and isinstance(req.get("reasoning"), dict):
        effort = req["reasoning"].get("effort")
    if effort is None:
        return None
    return False if effort == "none" else effort


class OpenAIEndpoints:
    """Routes under /v1. Relies on the request helpers, reply script and streaming of FakeOllama."""

    if TYPE_CHECKING:  # what FakeOllama, the class this one is mixed into, provides
        Error: type[Exception]
        model_error: str
        models: dict[str, dict]
        _ids: Iterator[int]

        async def _body(self, request: Request) -> dict: ...
        def _model_name(self, req: dict, *keys: str) -> str: ...
        def _stream_flag(self, req: dict, default: bool = True) -> bool: ...
        def _lookup(self, name: str) -> dict: ...
        async def _resolve_inference(self, name: str, request: Request) -> tuple[dict, str | None]: ...
        def _check_chat_caps(self, req: dict, name: str, record: dict, action: str) -> None: ...
        def _plan(self, req: dict, record: dict, fmt: Any = None, think: bool = False,
                  tools: list | None = None, messages: list | None = None) -> list[tuple[str, Any]]: ...
        def _metrics(self, prompt_tokens: int, eval_tokens: int, started: float) -> dict[str, int]: ...
        def _stream(self, path: str, model: str, lines: Sequence[dict | bytes], mode: str | None, *,
                    error_line: bytes, media_type: str = "application/x-ndjson") -> Response: ...
        def _reply(self, payload: dict, mode: str | None) -> Response: ...
        def _vectors(self, name: str, texts: list[str], dimensions: Any = None) -> list[list[float]]: ...
        def _texts(self, value: Any) -> list[str]: ...

    def _openai_routes(self) -> list[Route]:
        routes = [
            Route("/v1/chat/completions", self._v1_chat, methods=["POST"]),
            Route("/v1/completions", self._v1_completions, methods=["POST"]),
            Route("/v1/models", self._v1_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._v1_model, methods=["GET"]),  # ids hold ':' and '/'
            Route("/v1/embeddings", self._v1_embeddings, methods=["POST"]),
        ]
        for route in routes:
            if route.methods is None:
                raise RuntimeError("a Route given methods has them")
            route.methods.discard("HEAD")  # Ollama registers these without HEAD
        return routes

    @staticmethod
    def _openai_error(status: int, message: str) -> dict:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        return {"message": message, "type": kind, "param": None, "code": None}

    def _usage(self, prompt: Any, steps: list) -> dict:
        metrics = self._metrics(_word_count(prompt), len(steps), time.monotonic())
        p, c = metrics["prompt_eval_count"], metrics["eval_count"]
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _v1_base(self, prefix: str, kind: str, name: str) -> dict:
        return {"id": f"{prefix}-{next(self._ids)}", "object": kind, "created": int(time.time()),
                "model": name, "system_fingerprint": "fp_ollama"}

    def _sse_stream(self, request: Request, name: str, lines: list[bytes], mode: str | None) -> Response:
        error = _sse({"error": self._openai_error(500, self.model_error)})
        return self._stream(request.url.path, name, lines, mode,
                            error_line=error, media_type="text/event-stream")

    # ------------------------------------------------------------------ chat
    async def _v1_chat(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req)
        stream = self._stream_flag(req, default=False)
        record, mode = await self._resolve_inference(name, request)
        think, tools = _reasoning(req), req.get("tools")
        self._check_chat_caps({"think": think, "tools": tools}, name, record, "chat")
        messages = req.get("messages") if isinstance(req.get("messages"), list) else []
        steps = self._plan(req, record, _response_format(req), bool(think), tools, messages)
        usage = self._usage(messages, steps)
        finish = "tool_calls" if any(k == "tool_call" for k, _ in steps) else "stop"
        base = self._v1_base("chatcmpl", "chat.completion", name)
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(v for k, v in steps if k == "content")}
            if reasoning := "".join(v for k, v in steps if k == "thinking"):
                message["reasoning"] = reasoning
            if calls := [_openai_tool_call(v) for k, v in steps if k == "tool_call"]:
                message["tool_calls"] = calls
            return self._reply({**base, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                "usage": usage}, mode)

        base["object"] = "chat.completion.chunk"
        lines = []
        for i, (kind, value) in enumerate(steps):
            delta: dict[str, Any] = {"role": "assistant"} if i == 0 else {}
            if kind == "content":
                delta["content"] = value
            elif kind == "thinking":
                delta.update(content="", reasoning=value)
            else:
                delta["tool_calls"] = [_openai_tool_call(value)]
            lines.append(_sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
        lines.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
        if (req.get("stream_options") or {}).get("include_usage"):
            lines.append(_sse({**base, "choices": [], "usage": usage}))
        return self._sse_stream(request, name, [*lines, SSE_DONE], mode)

    # ----------------------------------------------------------- completions
    async def _v1_completions(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req)
        stream = self._stream_flag(req, default=False)
        record, mode = await self._resolve_inference(name, request)
        prompt = req.get("prompt", "")
        if not isinstance(prompt, str):
            raise self.Error(400, "invalid prompt: expected a string")
        self._check_chat_caps({}, name, record, "generate")
        steps = self._plan(req, record, _response_format(req))
        usage = self._usage(prompt, steps)
        base = self._v1_base("cmpl", "text_completion", name)
        if not stream:
            text = "".join(v for k, v in steps if k == "content")
            return self._reply({**base, "choices": [{"text": text, "index": 0, "finish_reason": "stop"}],
                                "usage": usage}, mode)
        lines = [_sse({**base, "choices": [{"text": v, "index": 0, "finish_reason": None}]})
                 for k, v in steps if k == "content"]
        lines.append(_sse({**base, "choices": [{"text": "", "index": 0, "finish_reason": "stop"}]}))
        if (req.get("stream_options") or {}).get("include_usage"):
            lines.append(_sse({**base, "choices": [], "usage": usage}))
        return self._sse_stream(request, name, [*lines, SSE_DONE], mode)

    # ---------------------------------------------------------------- models
    @staticmethod
    def _v1_model_entry(record: dict) -> dict:
        name = record["name"]
        owner = name.split("/")[-2] if "/" in name else "library"
        return {"id": name, "object": "model", "created": _unix(record["modified_at"]), "owned_by": owner}

    async def _v1_models(self, request: Request) -> Response:
        data = [self._v1_model_entry(r) for r in self.models.values()]
        return self._reply({"object": "list", "data": data}, None)

    async def _v1_model(self, request: Request) -> Response:
        record = self._lookup(request.path_params["model"])
        return self._reply(self._v1_model_entry(record), None)

    # ------------------------------------------------------------ embeddings
    async def _v1_embeddings(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req)
        _, mode = await self._resolve_inference(name, request)
        texts = self._texts(req.get("input"))
        if not texts:
            raise self.Error(400, "invalid input")
        vectors = self._vectors(name, texts, req.get("dimensions"))
        as_base64 = req.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() if as_base64 else v}
                for i, v in enumerate(vectors)]
        tokens = sum(_word_count(t) for t in texts)
        return self._reply({"object": "list", "data": data, "model": name,
                            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, mode)


def _word_count(value: Any) -> int:
    return len(re.findall(r"\w+", value if isinstance(value, str) else json.dumps(value)))
