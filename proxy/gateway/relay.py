"""Relaying an upstream response to the client.

A streamed reply (NDJSON or SSE) is passed on chunk by chunk as the upstream wrote it: never
re-encoded, never buffered, no Content-Length, ``X-Accel-Buffering: no``. While it streams we
also listen for the client going away and then close the upstream request at once, so a
closed browser tab stops the model instead of letting it generate to the end.

Only a client that left before the answer was complete is worth an info line. uvicorn's
``receive`` also answers ``http.disconnect`` once the response has ended, and a client may hang
up as soon as it has read the final line (Ollama's ``"done": true``, SSE's ``data: [DONE]``),
before the upstream's body end has been read: both are ordinary ends of a stream.

Anything else is read whole and answered with its own status, type and body.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from proxy.core import json_text
from proxy.core.errors import UpstreamError
from proxy.core.responses import stream_error_line
from proxy.gateway.headers import to_client
from proxy.upstream.client import Upstream

log = logging.getLogger("graphgate.relay")

STREAM_TYPES = ("application/x-ndjson", "text/event-stream")
# the longest line kept to tell a finished answer (a generate's done line carries its context,
# some bytes a token); a longer one, e.g. an upstream that sends no newlines, is not held in memory
LINE_KEPT = 4 << 20


def is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip() in STREAM_TYPES


class StreamRelay:
    """ASGI response that copies an open upstream stream to the client."""

    def __init__(self, upstream: Upstream, response: httpx.Response, path: str) -> None:
        self.upstream = upstream
        self.response = response
        self.path = path
        self.sse = response.headers.get("content-type", "").startswith("text/event-stream")
        self.ended = False  # the relay itself ended the response (all of the upstream's body relayed)
        self.last_line = b""  # the last whole non-blank line relayed
        self._partial: list[bytes] = []  # the line being relayed, up to the end of the last chunk
        self._partial_size = 0  # its bytes; -1 once it is longer than LINE_KEPT
        self.renamer: Any = None  # a grounding.ReplyRenamer when the client named a knowledge model

    def _start_message(self) -> Message:
        headers = [(k.encode("latin-1"), v.encode("latin-1"))
                   for k, v in to_client(self.response.headers.multi_items())]
        headers += [(b"x-accel-buffering", b"no"), (b"cache-control", b"no-cache")]
        return {"type": "http.response.start", "status": self.response.status_code, "headers": headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
                await self._copy(send)
                group.cancel_scope.cancel()
        finally:
            # closing the response closes the upstream connection: the model stops
            with anyio.CancelScope(shield=True):
                await self.response.aclose()

    async def _watch_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self.ended or _final_line(self.last_line, self.sse):
                    log.debug("client closed the connection after the whole answer to %s", self.path)
                else:
                    log.info("client went away during %s; closing the upstream request", self.path)
                scope.cancel()
                return

    def _note_lines(self, chunk: bytes) -> None:
        """Keep ``last_line`` current: the chunk's lines, with the line a previous chunk began."""
        end = chunk.rfind(b"\n")
        if end < 0:
            if self._partial_size >= 0:
                self._partial.append(chunk)
                self._partial_size += len(chunk)
                if self._partial_size > LINE_KEPT:
                    self._partial, self._partial_size, self.last_line = [], -1, b""
            return
        head = chunk[:end].rstrip(b"\r\n")
        if self._partial_size < 0:  # the end of a line too long to keep: only what follows counts
            cut = head.find(b"\n")
            head = head[cut + 1:] if cut >= 0 else b""
        elif b"\n" not in head and self._partial:  # the line began in an earlier chunk
            head = b"".join([*self._partial, head]).rstrip(b"\r\n")
        if head:  # else only blank lines ended here (an SSE event's end)
            self.last_line = head[head.rfind(b"\n") + 1:]
        rest = chunk[end + 1:]
        self._partial, self._partial_size = ([rest] if rest else []), len(rest)

    async def _copy(self, send: Send) -> None:
        await send(self._start_message())
        ends_with_newline = True
        try:
            async for chunk in self.upstream.iter_raw(self.response):
                if chunk and self.renamer is not None:
                    chunk = self.renamer.chunk(chunk)
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    ends_with_newline = chunk.endswith(b"\n")
                    self._note_lines(chunk)
            if self.renamer is not None and (rest := self.renamer.flush()):
                await send({"type": "http.response.body", "body": rest, "more_body": True})
                ends_with_newline = rest.endswith(b"\n")
                self._note_lines(rest)
        except UpstreamError as exc:
            # Ollama's way once bytes are out: one error line, then close (no done line)
            log.warning("upstream failed during %s: %s", self.path, exc.message)
            frame = stream_error_line(self.path, exc.message, self.sse)
            if not ends_with_newline:
                frame = b"\n" + frame
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        self.ended = True  # from here a disconnect is the response's own end, not the client leaving
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _final_line(line: bytes, sse: bool) -> bool:
    """Whether ``line`` ends an answer: Ollama's last line (``"done": true``, or a pull's
    ``"status": "success"``) or the OpenAI API's ``data: [DONE]``."""
    if sse:
        return line.strip() == b"data: [DONE]"
    try:
        last = json_text.loads(line, max_depth=json_text.BODY_DEPTH)   # the upstream's line
    except ValueError:
        return False
    return isinstance(last, dict) and (last.get("done") is True or last.get("status") == "success")


def whole_response(response: httpx.Response, body: bytes) -> Response:
    """The upstream's status, headers and body, with Content-Length set for ``body``."""
    reply = Response(body, status_code=response.status_code)
    reply.raw_headers = [h for h in reply.raw_headers if h[0] == b"content-length"] + [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in to_client(response.headers.multi_items())
    ]
    return reply


async def relay(upstream: Upstream, response: httpx.Response, path: str) -> Response | StreamRelay:
    """Answer the client with the upstream's response: streamed if it streams, whole otherwise."""
    if is_stream(response):
        return StreamRelay(upstream, response, path)
    return whole_response(response, await upstream.read(response))
