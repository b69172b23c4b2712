"""Rendering GraphGate's own errors in the shape each surface's clients parse.

Ollama clients read ``{"error": "..."}``; OpenAI clients (``/v1/*``) read
``{"error": {"message", "type", "param", "code"}}``. Both are ``application/json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

JSON_TYPE = "application/json; charset=utf-8"


def json_bytes(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(json_bytes(data), status_code=status, media_type=JSON_TYPE, headers=headers)


def _openai_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "api_error"


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    if path.startswith("/v1/"):
        return {"error": {"message": message, "type": _openai_type(status), "param": None, "code": None}}
    return {"error": message}


def error_response(path: str, status: int, message: str,
                   headers: Mapping[str, str] | None = None) -> Response:
    return json_response(error_body(path, status, message), status, headers)


def stream_error_line(path: str, message: str, sse: bool) -> bytes:
    """The last frame of a stream that failed after its first byte (Ollama: one error line)."""
    body = json_bytes(error_body(path, 500, message))
    return b"data: " + body + b"\n\n" if sse else body + b"\n"
