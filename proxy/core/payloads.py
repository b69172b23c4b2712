"""Reading and checking request bodies before anything reaches the upstream.

The checks mirror Ollama's own answers (``missing request body``, the JSON decoder's message,
``model is required``) so that a client sees the same errors with or without GraphGate.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from proxy.core import json_text
from proxy.core.errors import InvalidJSON, MissingBody, MissingField, PayloadTooLarge


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise MissingBody()
    try:   # bounded: "[[[[..." deeper than any real body is refused before it is parsed
        data = json_text.loads(raw, max_depth=json_text.BODY_DEPTH)
    except ValueError as exc:  # json.JSONDecodeError, bad UTF-8, too deep alike
        raise InvalidJSON(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidJSON(f"invalid JSON: expected an object, got {type(data).__name__}")
    try:   # a lone surrogate cannot be stored, tokenized or forwarded: refused once, for every body
        if json_text.maybe_surrogate(raw):
            json_text.refuse_lone_surrogates(data)
    except json_text.LoneSurrogate as exc:
        raise InvalidJSON(f"invalid JSON: {exc}") from None
    return data


def require_model(body: dict[str, Any], *, legacy_name: bool = False) -> str:
    """The request's model; Ollama also accepts the legacy ``name`` on some endpoints."""
    model = body.get("model")
    if not model and legacy_name:
        model = body.get("name")
    if not isinstance(model, str) or not model.strip():
        raise MissingField("model is required")
    return model


def require_fields(body: dict[str, Any], *names: str) -> None:
    for name in names:
        value = body.get(name)
        if not isinstance(value, str) or not value.strip():
            raise MissingField(f"{name} is required")
