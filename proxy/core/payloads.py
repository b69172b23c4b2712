"""Reading and checking request bodies before anything reaches the upstream.

The checks mirror Ollama's own answers (``missing request body``, the JSON decoder's message,
``model is required``) so that a client sees the same errors with or without GraphGate.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

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
    try:
        data = json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError and bad UTF-8 alike
        raise InvalidJSON(f"invalid JSON: {exc}") from None
    except RecursionError:  # "[[[[...": Python's parser gives up on deep nesting
        raise InvalidJSON("invalid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidJSON(f"invalid JSON: expected an object, got {type(data).__name__}")
    if _MAYBE_SURROGATE.search(raw):
        _refuse_lone_surrogates(data)
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")
# an escape ("\\ud800"; paired ones, an emoji, match too: the walk tells them apart), or one encoded
# raw (ED A0 80: not UTF-8, but Python's json decodes bytes with "surrogatepass")
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _refuse_lone_surrogates(data: Any) -> None:
    """A lone UTF-16 surrogate ("\\ud800" with no partner) parses into a str that cannot be encoded
    again: every later step (the store, tokenizer, the upstream's body) would fail with a 500 or a
    reset connection. Refused here, once, for every JSON body, including those relayed as sent."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    raise InvalidJSON(f"invalid JSON: a key{_at(where)} holds {_named(key)}")
                stack.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise InvalidJSON(f"invalid JSON: the string{_at(where)} holds {_named(value)}")


def _at(where: str) -> str:
    return f" at {where[:100]!r}" if where else ""


def _named(text: str) -> str:
    found = _SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "a surrogate"
    return f"a lone UTF-16 surrogate ({code}), which is not valid Unicode"


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
