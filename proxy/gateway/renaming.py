"""A reply under the model name the client asked for: a knowledge model's turn goes upstream as its
base model (proxy/gateway/grounding.py), and every line of the answer is renamed back."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


class ReplyRenamer:
    """Rewrites ``"model":"<base>"`` into the client's name in whole lines; a line cut between
    chunks is held until its end arrives (Ollama writes one whole line per chunk). A JSON string
    value cannot hold an unescaped quote, so the pair found is always a key and its value; plain
    byte replacement (compact JSON as Ollama writes it, and with a space after the colon) keeps
    the cost per line to a few hundred nanoseconds."""

    def __init__(self, upstream_name: str, client_name: str, field: str = "model") -> None:
        old, new = json.dumps(upstream_name).encode(), json.dumps(client_name, ensure_ascii=False).encode()
        key = json.dumps(field).encode()
        self.pairs = [(key + b":" + old, key + b":" + new), (key + b": " + old, key + b": " + new)]
        self.pending = b""

    def whole(self, body: bytes) -> bytes:
        for old, new in self.pairs:
            body = body.replace(old, new)
        return body

    def chunk(self, data: bytes) -> bytes:
        if self.pending:
            data = self.pending + data
        end = data.rfind(b"\n") + 1
        if end == len(data):
            self.pending = b""
            return self.whole(data)
        self.pending = data[end:]
        return self.whole(data[:end]) if end else b""

    def flush(self) -> bytes:
        rest, self.pending = self.pending, b""
        return self.whole(rest)


def rename_reply(response: Any, upstream_name: str, client_name: str, field: str = "model") -> Any:
    """``response`` (a StreamRelay or a whole Response) answering under ``client_name``."""
    if upstream_name == client_name:
        return response
    renamer = ReplyRenamer(upstream_name, client_name, field)
    if isinstance(response, Response):
        body = renamer.whole(bytes(response.body))
        response.body = body
        response.headers["content-length"] = str(len(body))
        return response
    response.renamer = renamer
    return response
