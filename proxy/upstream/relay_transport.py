"""Requests relayed for clients (any method, their headers, bodies streamed either way) as an
httpx transport over keep-alive HTTP/1.1 connections on asyncio streams.

Why not httpx's own transport: under a burst of 50 streamed chats (bench/load.py) httpcore's pool
took 13 % of the gateway's interpreter time, about 2 ms a relayed request. On every request's start
and end it polls every idle socket and, for each idle connection, counts the idle connections
again. Here the idle connections of an origin are a stack; only the one taken is checked. The
body is yielded chunk by chunk as the upstream framed it (an NDJSON line as it comes).

Errors come out as httpx's (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``WriteTimeout``, ``RemoteProtocolError``, ``ReadError``, ``WriteError``), for ``Upstream`` to
translate as it did before. Timeouts are the request's ``timeout`` extension, as httpx gives them.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

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

PIECE = 1 << 16     # the most read (and relayed) at once of a body
# a request the upstream may have acted on before its connection closed is never sent again: only
# these are, when a kept-alive connection turns out closed (a chat or a DELETE reaches Ollama once)
RESENDABLE = frozenset({"GET", "HEAD", "OPTIONS"})
Origin = tuple[str, str, int]
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
ILLEGAL_VALUE = re.compile(rb"[\r\n\0]")


class RelayTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, max_idle: int = 1024) -> None:
        self.max_idle = max_idle   # idle connections kept in all (each in use is never capped)
        self._idle: dict[Origin, list[Connection]] = {}
        self._closed = False
        self._ssl: ssl.SSLContext | None = None   # made once, for the first https connection

    async def aclose(self) -> None:
        self._closed = True   # connections still in use are closed when their reply ends
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for connection in stack:
                connection.close()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"cannot send to a {url.scheme!r} URL", request=request)
        timeout: dict[str, float | None] = request.extensions.get("timeout") or {}
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        head = _head(request)
        replayable = _content(request)
        for attempt in (1, 2):
            connection, reused = await self._checkout(origin, request, timeout.get("connect"))
            try:
                status, version, reason, headers = await self._exchange(connection, request, head, replayable,
                                                                         reused, timeout)
                body = _Body(self, origin, connection, request, headers, version,
                             empty=request.method == "HEAD" or status in (204, 304), read_timeout=timeout.get("read"))
            except Stale:
                connection.close()
                if attempt == 1 and replayable is not None and request.method in RESENDABLE:
                    continue   # the server closed it while it sat idle: once more, on a new one
                raise httpx.RemoteProtocolError("the connection closed before the reply began",
                                                request=request) from None
            except BaseException:
                connection.close()   # half sent or half read (or cancelled): never reused
                raise
            return httpx.Response(status, headers=headers, stream=body,
                                  extensions={"http_version": version, "reason_phrase": reason})
        raise AssertionError("unreachable")

    async def _checkout(self, origin: Origin, request: httpx.Request,
                        within: float | None) -> tuple[Connection, bool]:
        kept = take_usable(self._idle.get(origin, []))
        if kept is not None:
            return kept, True
        scheme, host, port = origin
        try:
            if scheme == "https" and self._ssl is None:
                # the certificates httpx trusts (SSL_CERT_FILE / SSL_CERT_DIR, else certifi)
                self._ssl = httpx.create_ssl_context()
            return await connect(host, port, self._ssl if scheme == "https" else None, within), False
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc), request=request) from None
        except ConnectFailed as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc

    def release(self, origin: Origin, connection: Connection) -> None:
        """A connection whose reply was read to its end, kept for the next request."""
        if self._closed or sum(map(len, self._idle.values())) >= self.max_idle:   # one origin, as a rule
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(origin, []).append(connection)

    async def _exchange(self, connection: Connection, request: httpx.Request, head: bytes, content: bytes | None,
                        reused: bool, limits: dict[str, float | None]) -> tuple[int, bytes, bytes, list[Any]]:
        reader, writer = connection.reader, connection.writer
        sent = time.monotonic()
        try:
            try:
                if content is not None:
                    writer.write(head + content)
                    await _drained(writer, limits.get("write"))
                else:
                    await _send_streamed(writer, head, request, limits.get("write"))
            except TimeoutError:
                raise httpx.WriteTimeout("the upstream took no more of the request", request=request) from None
            try:
                with anyio.fail_after(limits.get("read")):
                    return await read_head(reader)
            except TimeoutError:
                raise httpx.ReadTimeout("no reply began in time", request=request) from None
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            if stale(exc, reused, sent):
                raise Stale from exc
            raise httpx.RemoteProtocolError("the connection closed before the reply began", request=request) from exc
        except ProtocolViolation as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc


class _Body(httpx.AsyncByteStream):
    """A reply's body as the upstream sends it; its connection goes back to the transport once the
    body was read to its end, and is closed if it was left half read."""

    def __init__(self, transport: RelayTransport, origin: Origin, connection: Connection, request: httpx.Request,
                 headers: list[tuple[bytes, bytes]], version: bytes, *, empty: bool, read_timeout: float | None
                 ) -> None:
        named = lowered(headers)
        self._transport, self._origin, self._connection, self._request = transport, origin, connection, request
        self._timeout = read_timeout
        try:
            self._chunked, self._length = (False, 0) if empty else framing(named)
        except ProtocolViolation as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from None
        # a body that ends with the connection: the connection cannot be kept
        self._keep = keeps_alive(version, named) and (empty or self._chunked or self._length is not None)
        self._ended = False
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reader = self._connection.reader
        # asyncio's own timeout for each piece: a third of anyio's cost, paid for every line streamed
        try:
            try:
                if self._chunked:
                    while True:
                        async with asyncio.timeout(self._timeout):
                            left = await chunk_size(reader)
                        if left == 0:
                            break
                        while left:   # a chunk of any size is relayed in pieces, each read in time
                            async with asyncio.timeout(self._timeout):
                                piece = await reader.read(min(left, PIECE))
                            if not piece:
                                raise asyncio.IncompleteReadError(b"", left)
                            left -= len(piece)
                            yield piece
                        async with asyncio.timeout(self._timeout):
                            await chunk_end(reader)
                elif self._length is not None:
                    left = self._length
                    while left:
                        async with asyncio.timeout(self._timeout):
                            piece = await reader.read(min(left, PIECE))
                        if not piece:
                            raise httpx.RemoteProtocolError(
                                f"the reply ended early ({self._length - left} of {self._length} bytes)",
                                request=self._request)
                        left -= len(piece)
                        yield piece
                else:
                    while True:
                        async with asyncio.timeout(self._timeout):
                            piece = await reader.read(PIECE)
                        if not piece:
                            break
                        yield piece
            except TimeoutError:
                raise httpx.ReadTimeout("the reply stopped coming", request=self._request) from None
            except asyncio.IncompleteReadError as exc:
                raise httpx.RemoteProtocolError(f"the reply ended early ({len(exc.partial)} bytes into a chunk)",
                                                request=self._request) from None
            except (ProtocolViolation, asyncio.LimitOverrunError) as exc:
                raise httpx.RemoteProtocolError(str(exc) or "a line of the reply's framing is too long",
                                                request=self._request) from None
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc
            self._ended = True
        except BaseException:
            self._finish()
            raise
        self._finish()

    async def aclose(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        if self._ended and self._keep:
            self._transport.release(self._origin, self._connection)
        else:
            self._connection.close()


def _head(request: httpx.Request) -> bytes:
    """The request line and headers; a header that would end the line early (CR, LF, NUL) or a
    name that is no token is refused, as h11 did: it could smuggle a second request."""
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if not TOKEN.fullmatch(name) or ILLEGAL_VALUE.search(value):
            raise httpx.LocalProtocolError(f"a header not fit to send: {name[:40]!r}", request=request)
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _content(request: httpx.Request) -> bytes | None:
    """The request's body if httpx holds it whole (then it may be sent again), else None."""
    try:
        return request.content
    except httpx.RequestNotRead:
        return None


async def _drained(writer: asyncio.StreamWriter, within: float | None) -> None:
    """Wait until the upstream took what was written, at most ``within`` seconds (each write has
    its own limit: a blob upload of gigabytes may take an hour, but never stalls that long)."""
    async with asyncio.timeout(within):
        await writer.drain()


async def _send_streamed(writer: asyncio.StreamWriter, head: bytes, request: httpx.Request,
                         within: float | None) -> None:
    """The head, then the body as it comes: in chunks if httpx framed it so (no length was given).
    The wait for the client's next piece is not the upstream's to time."""
    chunked = b"chunked" in request.headers.get("transfer-encoding", "").lower().encode()
    writer.write(head)
    assert isinstance(request.stream, httpx.AsyncByteStream)
    async for part in request.stream:
        if not part:
            continue
        writer.write(b"%x\r\n%b\r\n" % (len(part), part) if chunked else part)
        await _drained(writer, within)
    if chunked:
        writer.write(b"0\r\n\r\n")
    await _drained(writer, within)

