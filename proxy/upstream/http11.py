"""HTTP/1.1 on asyncio streams, the part GraphGate's two upstream clients share: connections kept
alive and checked before reuse, a reply's head, framing sizes, telling a stale connection from a
broken one. ``JsonClient`` (GraphGate's own JSON calls) and ``RelayTransport`` (requests relayed
for clients) are built on it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import anyio

# Idle connections are dropped well before a server's own keep-alive timeout (uvicorn: 5 s). One
# that the server closes at once when reused (it gave up on it just as the request went out) is
# replaced once; a request the server held longer than STALE_WINDOW is never sent twice.
KEEPALIVE = 2.0
STALE_WINDOW = 1.0
READ_LIMIT = 1 << 20  # stream buffer: an embedding reply of a few MB is read in big pieces

Headers = list[tuple[bytes, bytes]]


class ConnectFailed(OSError):
    """The upstream could not be reached at all."""


class ProtocolViolation(Exception):
    """The upstream's reply is not HTTP/1.1 as we know it."""


class Stale(Exception):
    """A kept-alive connection was closed by the server before it answered."""


@dataclass(slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        # bytes waiting on an idle connection are nobody's reply (say, a server's 408 on closing)
        return (now - self.idle_since < KEEPALIVE and not buffered(self.reader) and not self.reader.at_eof()
                and not self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


def take_usable(idle: list[Connection]) -> Connection | None:
    """The most recently kept connection still fit to reuse; the unfit ones met on the way closed."""
    now = time.monotonic()
    while idle:
        connection = idle.pop()
        if connection.usable(now):
            return connection
        connection.close()
    return None


async def connect(host: str, port: int, context: ssl.SSLContext | None, within: float | None) -> Connection:
    """A new connection; ``TimeoutError`` or ``ConnectFailed`` if there is none."""
    try:
        with anyio.fail_after(within):
            reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=READ_LIMIT)
    except TimeoutError:
        limit = f" within {within:g} s" if within is not None else ""
        raise TimeoutError(f"no connection{limit}") from None
    except OSError as exc:
        raise ConnectFailed(exc.errno, str(exc) or type(exc).__name__) from exc
    return Connection(reader, writer)


def stale(exc: BaseException, reused: bool, sent: float) -> bool:
    """Whether a reply that never began means the server had closed the kept-alive connection
    (send the request again, once) rather than failed on it (never sent twice)."""
    return reused and not getattr(exc, "partial", b"") and time.monotonic() - sent < STALE_WINDOW


async def read_head(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes, Headers]:
    """(status, HTTP version, reason, headers as sent) of the reply, interim (1xx) replies skipped."""
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ProtocolViolation("the reply's headers are too long") from None
        lines = raw.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise ProtocolViolation(f"not an HTTP/1.x reply: {lines[0][:60]!r}")
        status = int(code)
        if status == 101:
            raise ProtocolViolation("the upstream switched protocols, which no request here asks for")
        if 100 <= status < 200:
            continue  # an interim reply (100 Continue): the real one follows
        headers: Headers = []
        for line in lines[1:]:
            if line:
                name, colon, value = line.partition(b":")
                if not colon or not name or name != name.strip():
                    raise ProtocolViolation(f"a malformed header line {line[:40]!r}")
                headers.append((name, value.strip()))
        return status, version, reason, headers


def keeps_alive(version: bytes, headers: dict[bytes, bytes]) -> bool:
    return version == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()


def lowered(headers: Headers) -> dict[bytes, bytes]:
    """The headers by lower-cased name, a repeated one's values joined by ", " (RFC 9110 5.3)."""
    named: dict[bytes, bytes] = {}
    for name, value in headers:
        key = name.lower()
        named[key] = named[key] + b", " + value if key in named else value
    return named


def framing(headers: dict[bytes, bytes]) -> tuple[bool, int | None]:
    """(chunked, length) of a reply's body as its headers frame it (neither: until the connection
    ends). Ambiguous framing, the kind that lets one reply be read as two, is refused."""
    codings = [c.strip().lower() for c in headers.get(b"transfer-encoding", b"").split(b",") if c.strip()]
    if codings:
        if codings[-1] != b"chunked":
            raise ProtocolViolation(f"a reply coded {b', '.join(codings)!r}, not chunked last")
        if b"content-length" in headers:
            raise ProtocolViolation("a reply framed both by chunks and by its length")
        return True, None
    if b"content-length" not in headers:
        return False, None
    lengths = {size(value, 10, "Content-Length") for value in headers[b"content-length"].split(b",")}
    if len(lengths) != 1:
        raise ProtocolViolation(f"a reply with differing lengths {headers[b'content-length'][:40]!r}")
    return False, lengths.pop()


def size(raw: bytes, base: int, what: str) -> int:
    text = raw.strip()
    digits = b"0123456789abcdefABCDEF" if base == 16 else b"0123456789"
    if not text or text.strip(digits):  # no sign, no spaces inside, no "0x"
        raise ProtocolViolation(f"bad {what} {raw[:20]!r}")
    return int(text, base)


async def chunk_size(reader: asyncio.StreamReader) -> int:
    """The next chunk's size (chunked transfer encoding); at the last (0), its trailers are read."""
    found = size((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16, "chunk size")
    if found == 0:
        while (await reader.readuntil(b"\r\n")) != b"\r\n":
            pass  # trailers, if any
    return found


async def chunk_end(reader: asyncio.StreamReader) -> None:
    if await reader.readexactly(2) != b"\r\n":
        raise ProtocolViolation("a chunk did not end where its size said")


def buffered(reader: asyncio.StreamReader) -> int:
    """Bytes received and not yet read (asyncio's StreamReader keeps them in ``_buffer``)."""
    return len(getattr(reader, "_buffer", b""))
