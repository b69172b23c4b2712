"""Relaying an upstream response to the client.

A streamed reply (NDJSON or SSE) is passed on chunk by chunk as the upstream wrote it: never
re-encoded, never buffered, no Content-Length, ``X-Accel-Buffering: no``. While it streams we
also listen for the client going away and then close the upstream request at once, so a
closed browser tab stops the model instead of letting it generate to the end.

Anything else is read whole and answered with its own status, type and body.
"""

from __future__ import annotations

import logging

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from .errors import UpstreamError
from .headers import to_client
from .responses import stream_error_line
from .upstream import Upstream

log = logging.getLogger("graphgate.relay")

STREAM_TYPES = ("application/x-ndjson", "text/event-stream")


def is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip() in STREAM_TYPES


class StreamRelay:
    """ASGI response that copies an open upstream stream to the client."""

    def __init__(self, upstream: Upstream, response: httpx.Response, path: str) -> None:
        self.upstream = upstream
        self.response = response
        self.path = path
        self.sse = response.headers.get("content-type", "").startswith("text/event-stream")

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
                log.info("client went away during %s; closing the upstream request", self.path)
                scope.cancel()
                return

    async def _copy(self, send: Send) -> None:
        await send(self._start_message())
        ends_with_newline = True
        try:
            async for chunk in self.upstream.iter_raw(self.response):
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    ends_with_newline = chunk.endswith(b"\n")
        except UpstreamError as exc:
            # Ollama's way once bytes are out: one error line, then close (no done line)
            log.warning("upstream failed during %s: %s", self.path, exc.message)
            frame = stream_error_line(self.path, exc.message, self.sse)
            if not ends_with_newline:
                frame = b"\n" + frame
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


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
