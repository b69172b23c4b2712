"""GraphGate's own calls to the upstream (extraction, summaries, embeddings, model discovery):
one JSON request and its whole reply, over a small keep-alive pool of HTTP/1.1 connections on
asyncio streams.

Why not httpx for these: ingestion makes thousands of them a minute, and httpx with httpcore spent
about 0.6 ms of CPU on each (pool bookkeeping that polls every idle socket, h11, three stream
layers), a quarter of the gateway's CPU per ingested chunk; bench/ingest.py (a) went from 84 to
115+ chunks/s without it. Requests relayed for clients (any method, headers, streamed bodies)
still go through httpx in ``Upstream.open``.

It speaks just what this needs: one request at a time per connection; replies framed by
Content-Length, by chunked transfer encoding, or by the end of the connection. Errors come out as
``ConnectFailed``, ``TimeoutError`` or ``ProtocolViolation`` (``OSError`` when the connection
breaks), for ``Upstream`` to translate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx

# Idle connections are dropped well before a server's own keep-alive timeout (uvicorn: 5 s). One
# that the server closes at once when reused (it gave up on it just as the request went out) is
# replaced once; a request the server held longer than STALE_WINDOW is never sent twice.
KEEPALIVE = 2.0
STALE_WINDOW = 1.0
MAX_IDLE = 128  # up to GRAPHGATE_LLM_CONCURRENCY + GRAPHGATE_EMBED_CONCURRENCY calls at once
READ_LIMIT = 1 << 20  # stream buffer: an embedding reply of a few MB is read in big pieces


class ConnectFailed(OSError):
    """The upstream could not be reached at all."""


class ProtocolViolation(Exception):
    """The upstream's reply is not HTTP/1.1 as we know it."""


class _Stale(Exception):
    """A kept-alive connection was closed by the server before it answered."""


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        # bytes waiting on an idle connection are nobody's reply (say, a server's 408 on closing)
        return (now - self.idle_since < KEEPALIVE and not _buffered(self.reader) and not self.reader.at_eof()
                and not self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


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
        self._idle: list[_Connection] = []
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
                except _Stale:
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

    async def _checkout(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection, True
            connection.close()
        try:
            with anyio.fail_after(self.connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=READ_LIMIT)
        except TimeoutError:
            raise TimeoutError(f"no connection within {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectFailed(exc.errno, str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer), False

    def _head(self, method: str, path: str, body: bytes | None) -> bytes:
        lines = [f"{method} {self.base}{path} HTTP/1.1".encode("ascii"), b"host: " + self._host_header,
                 b"user-agent: graphgate", b"accept: application/json", b"accept-encoding: identity"]
        if body is not None:
            lines += [b"content-type: application/json", b"content-length: %d" % len(body)]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    # --- one exchange ---

    async def _exchange(self, connection: _Connection, method: str, head: bytes, body: bytes | None,
                        reused: bool) -> tuple[int, bytes, bool]:
        reader, writer = connection.reader, connection.writer
        sent = time.monotonic()
        try:
            writer.write(head + body if body else head)
            await writer.drain()
            with anyio.fail_after(self.read_timeout):
                status, headers, version = await self._read_head(reader)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            if reused and not getattr(exc, "partial", b"") and time.monotonic() - sent < STALE_WINDOW:
                raise _Stale from exc
            raise ProtocolViolation("the connection closed before the reply began") from exc
        keep = version == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()
        if method == "HEAD" or status in (204, 304):
            return status, b"", keep
        try:
            with anyio.fail_after(self.read_timeout):
                if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                    data = await self._read_chunked(reader)
                elif b"content-length" in headers:
                    data = await reader.readexactly(_size(headers[b"content-length"], 10, "Content-Length"))
                else:
                    return status, await reader.read(), False  # the body ends with the connection
        except asyncio.IncompleteReadError as exc:
            raise ProtocolViolation(f"the reply ended early ({len(exc.partial)} bytes of its body)") from None
        except asyncio.LimitOverrunError:
            raise ProtocolViolation("a line of the reply's framing is too long") from None
        return status, data, keep  # bytes after the body make it unusable (``usable``)

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], bytes]:
        while True:
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise ProtocolViolation("the reply's headers are too long") from None
            lines = raw.split(b"\r\n")
            version, _, rest = lines[0].partition(b" ")
            code = rest[:3]
            if not version.startswith(b"HTTP/1.") or not code.isdigit():
                raise ProtocolViolation(f"not an HTTP/1.x reply: {lines[0][:60]!r}")
            status = int(code)
            if 100 <= status < 200:
                continue  # an interim reply (100 Continue): the real one follows
            headers: dict[bytes, bytes] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower()] = value.strip()
            return status, headers, version

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        while True:
            size = _size((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16, "chunk size")
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers, if any
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise ProtocolViolation("a chunk did not end where its size said")


def _size(raw: bytes, base: int, what: str) -> int:
    text = raw.strip()
    digits = b"0123456789abcdefABCDEF" if base == 16 else b"0123456789"
    if not text or text.strip(digits):  # no sign, no spaces inside, no "0x"
        raise ProtocolViolation(f"bad {what} {raw[:20]!r}")
    return int(text, base)


def _buffered(reader: asyncio.StreamReader) -> int:
    """Bytes received and not yet read (asyncio's StreamReader keeps them in ``_buffer``)."""
    return len(getattr(reader, "_buffer", b""))
