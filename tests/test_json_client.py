"""GraphGate's own JSON calls over real sockets on 127.0.0.1: the fake Ollama under uvicorn, and
raw servers scripted byte by byte for the framings and failures the client must handle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from proxy.core.errors import UpstreamProtocolError, UpstreamStatusError, UpstreamTimeout, UpstreamUnavailable
from proxy.core.settings import Settings
from proxy.upstream.client import Upstream
from proxy.upstream.json_client import JsonClient
from tests.fake_ollama import FakeOllama, fake_embedding

pytestmark = pytest.mark.anyio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def upstream_at(url: str, **environ: str) -> Upstream:
    return Upstream(Settings.load(environ={"GRAPHGATE_UPSTREAM": url, **environ}))


def pool(upstream: Upstream) -> JsonClient:
    """The upstream's own JSON connections (an Upstream without an injected transport has them)."""
    if upstream._json is None:
        raise AssertionError("the Upstream was given a transport: it has no JSON client")
    return upstream._json


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on 127.0.0.1 that runs ``handler`` for each connection; yields its URL and a list
    that counts the connections it accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (Content-Length framed, as the client sends them)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head + await reader.readexactly(length)


def reply(body: bytes, *, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: application/json\r\n" + extra
            + b"content-length: %d\r\n\r\n" % len(body) + body)


async def test_calls_the_fake_ollama_and_keeps_one_connection_alive() -> None:
    fake = FakeOllama()
    with fake.serve() as url:
        upstream = upstream_at(url)
        try:
            reply_ = await upstream.call_json("POST", "/api/embed", {"model": "nomic-embed-text",
                                                                      "input": ["alpha", "beta gamma"]})
            assert reply_["embeddings"] == [fake_embedding("alpha", 64), fake_embedding("beta gamma", 64)]
            tags = await upstream.call_json("GET", "/api/tags", deadline=5)
            assert any(m["name"] == "llama3.2:latest" for m in tags["models"])
            assert len(pool(upstream)._idle) == 1  # both calls went over the same connection
        finally:
            await upstream.aclose()
    assert [r.path for r in fake.requests] == ["/api/embed", "/api/tags"]
    assert fake.requests[0].json == {"model": "nomic-embed-text", "input": ["alpha", "beta gamma"]}


async def test_a_chunked_reply_with_trailers_is_put_together() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"5;ext=1\r\n{\"a\":\r\n4\r\n 12}\r\n0\r\nx-trailer: yes\r\n\r\n")
        await writer.drain()
        await read_request(reader)  # and the connection serves the next call
        writer.write(reply(b'{"b": 2}'))
        await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await upstream.call_json("POST", "/api/chat", {"x": 1}) == {"a": 12}
        assert await upstream.call_json("POST", "/api/chat", {"x": 2}) == {"b": 2}
        await upstream.aclose()
    assert len(accepted) == 1


async def test_a_reply_framed_by_the_end_of_the_connection_is_read_to_the_end() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"whole\": true}")
        await writer.drain()
        writer.close()

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        assert await upstream.call_json("POST", "/api/embed", {}) == {"whole": True}
        assert pool(upstream)._idle == []  # nothing to keep
        await upstream.aclose()


async def test_a_kept_connection_the_server_drops_as_the_next_request_arrives_is_replaced_once() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b'{"n": 1}'))  # kept alive ...
        await writer.drain()
        await read_request(reader)  # ... until the server gives up on it just as a request comes
        writer.transport.abort()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}  # sent again, on a new one
        await upstream.aclose()
    assert len(accepted) == 2


async def test_an_error_status_carries_the_upstreams_message() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b'{"error": "model \\"nope\\" not found, try pulling it first"}', status="404 Not Found"))
        await writer.drain()

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        with pytest.raises(UpstreamStatusError) as failure:
            await upstream.call_json("POST", "/api/chat", {"model": "nope"})
        assert failure.value.status == 404 and 'model "nope" not found' in failure.value.message
        await upstream.aclose()


async def test_nobody_listening_is_unreachable() -> None:
    async def read_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with raw_server(read_only) as (url, _):
        pass  # closed: the port is free again
    upstream = upstream_at(url)
    with pytest.raises(UpstreamUnavailable, match="is unreachable"):
        await upstream.call_json("POST", "/api/embed", {})
    await upstream.aclose()


async def test_a_server_that_never_answers_times_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await anyio.sleep(30)

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url, GRAPHGATE_READ_TIMEOUT="0.3")
        with anyio.fail_after(10), pytest.raises(UpstreamTimeout, match="within 0.3 s"):
            await upstream.call_json("POST", "/api/chat", {})
        with anyio.fail_after(10), pytest.raises(UpstreamTimeout, match="within 0.2 s"):
            await upstream.call_json("GET", "/api/tags", deadline=0.2)
        assert pool(upstream)._idle == []
        await upstream.aclose()


@pytest.mark.parametrize(("answer", "problem", "kept"), [
    (b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"cut\":", "ended early", False),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x reply", False),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size", False),
    (b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n{}", "bad Content-Length", False),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-2\r\n{}\r\n", "bad chunk size", False),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"0" * 2_000_000, "too long", False),
    (b"", "closed before the reply began", False),  # on a new connection: not sent again
    (b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnope", "invalid JSON", True),  # well framed
])
async def test_a_garbled_reply_is_a_protocol_error(answer: bytes, problem: str, kept: bool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        with pytest.raises(UpstreamProtocolError, match=problem):
            await upstream.call_json("POST", "/api/chat", {})
        assert len(pool(upstream)._idle) == kept  # a connection that broke mid-reply is never reused
        await upstream.aclose()


async def test_a_cancelled_call_does_not_leave_its_connection_in_the_pool() -> None:
    closed, received = anyio.Event(), anyio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            if b'"slow"' in request:
                received.set()
                await reader.read()  # returns once the client has closed the connection
                closed.set()
                return
            writer.write(reply(b'{"ok": true}'))
            await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        opened = []
        checkout = pool(upstream)._checkout

        async def recorded_checkout():
            connection, reused = await checkout()
            opened.append(connection)
            return connection, reused

        pool(upstream)._checkout = recorded_checkout  # type: ignore[method-assign]
        with anyio.fail_after(30), anyio.CancelScope() as call:   # cancelled once the server has the request
            async with anyio.create_task_group() as group:
                async def cancel_once_sent() -> None:
                    await received.wait()
                    call.cancel()

                group.start_soon(cancel_once_sent)
                await upstream.call_json("POST", "/api/chat", {"slow": 1})
        assert call.cancelled_caught
        assert pool(upstream)._idle == []  # its reply could still arrive: never reused
        assert opened[0].writer.is_closing()  # and its socket is closed at once, not left to the collector
        with anyio.fail_after(5):
            await closed.wait()
        assert await upstream.call_json("POST", "/api/chat", {"fast": 1}) == {"ok": True}
        await upstream.aclose()
    assert len(accepted) == 2


async def test_bytes_left_on_an_idle_connection_are_nobodys_reply() -> None:
    unasked = anyio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b'{"n": 1}'))
        await writer.drain()
        await anyio.sleep(0.05)
        # unasked for: a server giving up on the connection says so, then closes
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        unasked.set()
        await anyio.sleep(5)  # ... and lingers before closing

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}
        with anyio.fail_after(30):
            await unasked.wait()
        await anyio.sleep(0.05)  # the 408 is in the connection's buffer now (written: loopback delivers at once)
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}  # a new connection's reply
        await upstream.aclose()
    assert len(accepted) == 2


async def test_a_reply_longer_than_it_said_is_not_followed_on_the_same_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b'{"n": 1}') + b'{"extra": "bytes"}')
        await writer.drain()
        await read_request(reader)
        writer.write(reply(b'{"n": 2}'))
        await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        await anyio.lowlevel.checkpoint()
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}
        await anyio.sleep(0.1)
        assert await upstream.call_json("POST", "/api/chat", {}) == {"n": 1}  # not {"extra": ...}
        await upstream.aclose()
    assert len(accepted) == 2


async def test_a_request_the_server_held_for_a_while_is_never_sent_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.upstream import http11

    monkeypatch.setattr(http11, "STALE_WINDOW", 0.2)
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.write(reply(b'{"n": 1}'))
        await writer.drain()
        received.append(await read_request(reader))
        await anyio.sleep(0.5)  # working on it ... then the server dies without an answer
        writer.transport.abort()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await upstream.call_json("POST", "/api/chat", {"first": 1}) == {"n": 1}
        with pytest.raises(UpstreamProtocolError, match="closed before the reply began"):
            await upstream.call_json("POST", "/api/chat", {"second": 1})
        await upstream.aclose()
    assert len(received) == 2 and len(accepted) == 1


async def test_connections_in_use_when_the_client_closes_are_closed_when_their_call_ends() -> None:
    release, asked = anyio.Event(), anyio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        asked.set()
        await release.wait()
        writer.write(reply(b'{"late": true}'))
        await writer.drain()
        await anyio.sleep(5)

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        results = []

        async def call() -> None:
            results.append(await upstream.call_json("POST", "/api/chat", {}))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(30):   # the call is out: its request has reached the server
                await asked.wait()
            await upstream.aclose()
            release.set()
        assert results == [{"late": True}] and pool(upstream)._idle == []
