"""Replies GraphGate writes itself (the /context prefix), in exactly the shapes clients parse:
Ollama NDJSON or JSON, OpenAI SSE or JSON."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from starlette.responses import Response, StreamingResponse

from proxy.core.responses import JSON_TYPE, json_bytes


def created_at() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # always with the fraction (OllamaKit)


def _metrics(started: float, prompt_tokens: int, tokens: int) -> dict[str, int]:
    total = max(int((time.perf_counter() - started) * 1e9), 1)
    return {"total_duration": total, "load_duration": 1, "prompt_eval_count": max(prompt_tokens, 1),
            "prompt_eval_duration": 1, "eval_count": max(tokens, 1), "eval_duration": total}


def ollama_reply(model: str, text: str, *, stream: bool, started: float, prompt_tokens: int, tokens: int) -> Response:
    final: dict[str, Any] = {"model": model, "created_at": created_at(),
                             "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
                             **_metrics(started, prompt_tokens, tokens)}
    if not stream:
        final["message"]["content"] = text
        return Response(json_bytes(final), media_type=JSON_TYPE)
    first = {"model": model, "created_at": created_at(), "message": {"role": "assistant", "content": text},
             "done": False}

    async def lines() -> AsyncIterator[bytes]:
        yield json_bytes(first) + b"\n"
        yield json_bytes(final) + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"x-accel-buffering": "no"})


def openai_reply(model: str, text: str, *, stream: bool, prompt_tokens: int, tokens: int,
                 include_usage: bool = False) -> Response:
    ident, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
    base: dict[str, Any] = {"id": ident, "created": created, "model": model, "system_fingerprint": "fp_ollama"}
    if not stream:
        body = {**base, "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}], "usage": usage}
        return Response(json_bytes(body), media_type=JSON_TYPE)
    chunk = {**base, "object": "chat.completion.chunk"}
    first = {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
    events = [{**chunk, "choices": [first]},
              {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    if include_usage:
        events.append({**chunk, "choices": [], "usage": usage})

    async def sse() -> AsyncIterator[bytes]:
        for event in events:
            yield b"data: " + json_bytes(event) + b"\n\n"
        yield b"data: [DONE]\n\n"

    response = StreamingResponse(sse(), headers={"x-accel-buffering": "no"})
    response.headers["content-type"] = "text/event-stream"
    return response
