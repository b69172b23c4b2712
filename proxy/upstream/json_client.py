"""GraphGate's own calls to the upstream (extraction, summaries, embeddings, model discovery):
one JSON request and its whole reply, over a small keep-alive pool of HTTP/1.1 connections on
asyncio streams.

Why not httpx for these: ingestion makes thousands of them a minute, and httpx with httpcore spent
about 0.6 ms of CPU on each (pool bookkeeping that polls every idle socket, h11, three stream
layers), a quarter of the gateway's CPU per ingested chunk; bench/ingest.py (a) went from 84 to
115+ chunks/s without it. Requests relayed for clients (any method, headers, streamed bodies)
go through httpx in ``Upstream.open``, over ``RelayTransport`` (relay_transport.py).

It speaks just what this needs: one request at a time per connection; replies framed by
Content-Length, by chunked transfer encoding, or by the end of the connection. Errors come out as
``ConnectFailed``, ``TimeoutError`` or ``ProtocolViolation`` (``OSError`` when the connection
breaks), for ``Upstream`` to translate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import urlsplit

import anyio
import httpx

from proxy.upstream.http11 import (
    ConnectFailed,
    Connection,
    ProtocolViolation,
    Stale,
    chunk_end,
    chunk_size,
    connect,
    framing,
    keeps_alive,
    lowered,
    read_head,
    stale,
    take_usable,
)

__all__ = ["ConnectFailed", "JsonClient", "ProtocolViolation"]

MAX_IDLE = 128  # up to GRAPHGATE_LLM_CONCURRENCY + GRAPHGATE_EMBED_CONCURRENCY calls at once


class JsonClient:
    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        # the certificates httpx trusts (SSL_CERT_FILE / SSL_CERT_DIR, else certifi), as for relayed requests
        self._ssl = httpx.create_ssl_context() if parts.scheme == "https" else None
        name = f"[{self.host}]" if ":" in self.host else self.host
        name = name if name.isascii() else name.encode("idna").decode("ascii")
        self._host_header = (name + (f":{parts.port}" if parts.port else "")).encode("ascii")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[Connection] = []
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True  # connections still in use are closed when their call ends
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def request(self, method: str, path: str, body: bytes | None = None, *,
                      deadline: float | None = None) -> tuple[int, bytes]:
        """(status, body) of the reply. ``deadline`` bounds the whole call; otherwise connecting
        is bounded by the connect timeout, and the wait for the reply, then for its body, by the
        read timeout (a non-streamed reply comes only once the model is done)."""
        head = self._head(method, path, body)
        with anyio.fail_after(deadline) if deadline is not None else contextlib.nullcontext():
            for attempt in (1, 2):
                connection, reused = await self._checkout()
                try:
                    status, data, keep = await self._exchange(connection, method, head, body, reused)
                except Stale:
                    connection.close()
                    if attempt == 1:
                        continue  # the server closed it while it sat idle: once more, on a new one
                    raise ProtocolViolation("the connection closed before the reply began") from None
                except BaseException:
                    connection.close()  # a reply half read (or a cancelled call) leaves it unusable
                    raise
                if keep and not self._closed and len(self._idle) < MAX_IDLE:
                    connection.idle_since = time.monotonic()
                    self._idle.append(connection)
                else:
                    connection.close()
                return status, data
        raise AssertionError("unreachable")

    # --- connections ---

    async def _checkout(self) -> tuple[Connection, bool]:
        kept = take_usable(self._idle)
        if kept is not None:
            return kept, True
        return await connect(self.host, self.port, self._ssl, self.connect_timeout), False

    def _head(self, method: str, path: str, body: bytes | None) -> bytes:
        lines = [f"{method} {self.base}{path} HTTP/1.1".encode("ascii"), b"host: " + self._host_header,
                 b"user-agent: graphgate", b"accept: application/json", b"accept-encoding: identity"]
        if body is not None:
            lines += [b"content-type: application/json", b"content-length: %d" % len(body)]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    # --- one exchange ---

    async def _exchange(self, connection: Connection, method: str, head: bytes, body: bytes | None,
                        reused: bool) -> tuple[int, bytes, bool]:
        reader, writer = connection.reader, connection.writer
        sent = time.monotonic()
        try:
            writer.write(head + body if body else head)
            await writer.drain()
            with anyio.fail_after(self.read_timeout):
                status, version, _, raw_headers = await read_head(reader)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            if stale(exc, reused, sent):
                raise Stale from exc
            raise ProtocolViolation("the connection closed before the reply began") from exc
        headers = lowered(raw_headers)
        keep = keeps_alive(version, headers)
        if method == "HEAD" or status in (204, 304):
            return status, b"", keep
        chunked, length = framing(headers)
        try:
            with anyio.fail_after(self.read_timeout):
                if chunked:
                    data = await self._read_chunked(reader)
                elif length is not None:
                    data = await reader.readexactly(length)
                else:
                    return status, await reader.read(), False  # the body ends with the connection
        except asyncio.IncompleteReadError as exc:
            raise ProtocolViolation(f"the reply ended early ({len(exc.partial)} bytes of its body)") from None
        except asyncio.LimitOverrunError:
            raise ProtocolViolation("a line of the reply's framing is too long") from None
        return status, data, keep  # bytes after the body make it unusable (``usable``)

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        while (length := await chunk_size(reader)) != 0:
            parts.append(await reader.readexactly(length))
            await chunk_end(reader)
        return b"".join(parts)
