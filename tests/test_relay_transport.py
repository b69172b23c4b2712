"""Requests relayed for clients go over GraphGate's own HTTP/1.1 transport
(proxy/upstream/relay_transport.py): real sockets on 127.0.0.1, raw servers scripted byte by byte
for the framings and failures, and the whole gateway in front of the fake Ollama."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from proxy.core.errors import UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from proxy.core.settings import Settings
from proxy.upstream.client import Upstream
from proxy.upstream.relay_transport import RelayTransport
from tests.fake_ollama import FakeOllama
from tests.test_json_client import raw_server, read_request, reply

pytestmark = pytest.mark.anyio


def upstream_at(url: str, **environ: str) -> Upstream:
    return Upstream(Settings.load(environ={"GRAPHGATE_UPSTREAM": url, **environ}))


async def relayed(upstream: Upstream, path: str = "/api/chat", content: object = b"{}") -> tuple[int, bytes]:
    response = await upstream.open("POST", path, headers=[("content-type", "application/json")], content=content)
    return response.status_code, await upstream.read(response)


async def test_successive_relayed_requests_share_one_kept_alive_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            writer.write(reply(b'{"echo": %d}' % len(request)))
            await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        for _ in range(3):
            status, body = await relayed(upstream)
            assert status == 200 and json.loads(body)["echo"] > 0
        await upstream.aclose()
    assert len(accepted) == 1


async def test_chunks_are_relayed_as_the_upstream_sends_them_and_the_connection_is_kept() -> None:
    lines = [b'{"n": %d}\n' % i for i in range(3)]
    sent_last = anyio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n")
            for line in lines:
                writer.write(b"%x\r\n%b\r\n" % (len(line), line))
                await writer.drain()
                await anyio.sleep(0.05)
            sent_last.set()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        for _ in range(2):
            sent_last = anyio.Event()
            response = await upstream.open("POST", "/api/chat", content=b"{}")
            got: list[bytes] = []
            async for chunk in upstream.iter_raw(response):
                if not got:
                    assert not sent_last.is_set()   # the first line came while the server was still writing
                got.append(chunk)
            await response.aclose()
            assert got == lines
        await upstream.aclose()
    assert len(accepted) == 1


async def test_a_reply_left_half_read_closes_its_connection_and_the_next_request_opens_another() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await reader.read()   # until the client hangs up

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        for _ in range(2):
            response = await upstream.open("POST", "/api/chat", content=b"{}")
            async for chunk in upstream.iter_raw(response):
                assert chunk == b"first"
                break
            await response.aclose()
        await upstream.aclose()
    assert len(accepted) == 2


async def test_a_kept_connection_the_server_closed_meanwhile_is_replaced_for_a_get() -> None:
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.write(reply(b'{"n": 1}'))
        await writer.drain()
        # closed on the next request without a reply: a keep-alive race, not the request's fault
        try:
            await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        writer.transport.abort()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        for _ in range(2):
            response = await upstream.open("GET", "/api/tags")
            assert (response.status_code, await upstream.read(response)) == (200, b'{"n": 1}')
        await upstream.aclose()
    assert len(accepted) == 2 and len(received) == 2


async def test_a_post_whose_connection_closed_without_a_reply_is_not_sent_again() -> None:
    """The upstream may have acted on it (a chat, a delete) before it went away."""
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.write(reply(b'{"n": 1}'))
        await writer.drain()
        received.append(await read_request(reader))
        writer.transport.abort()   # read it, then died

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await relayed(upstream) == (200, b'{"n": 1}')
        with pytest.raises(UpstreamProtocolError, match="closed before the reply began"):
            await relayed(upstream, "/api/delete", b'{"model": "m"}')
        await upstream.aclose()
    assert len(accepted) == 1 and len(received) == 2


async def test_an_upload_longer_than_the_write_timeout_passes_while_each_piece_is_taken_in_time() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"{}"))
        await writer.drain()

    async def slow_pieces() -> AsyncIterator[bytes]:
        for i in range(6):
            await anyio.sleep(0.3)   # the client's pace, which is not the upstream's to time
            yield b"%d;" % i

    async with raw_server(handler) as (url, _):
        # the write limit is the read timeout: 1 s, against an upload of 1.8 s (a whole-upload limit fails)
        upstream = upstream_at(url, GRAPHGATE_READ_TIMEOUT="1")
        response = await upstream.open("POST", "/api/blobs/sha256:ab",
                                       headers=[("content-length", "12")], content=slow_pieces())
        assert (response.status_code, await upstream.read(response)) == (200, b"{}")
        await upstream.aclose()


async def test_a_header_that_would_end_its_line_is_refused_before_anything_is_sent() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        with pytest.raises(UpstreamProtocolError, match="a header not fit to send"):
            await upstream.open("GET", "/api/tags", headers=[("x-note", "a\r\nX-Injected: 1")])
        await upstream.aclose()
    assert accepted == []   # refused before a connection was made


async def test_a_big_chunk_is_relayed_in_pieces_as_it_comes() -> None:
    body = b"y" * 200_000
    halfway = anyio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n" % len(body))
        writer.write(body[:100_000])
        await writer.drain()
        await halfway.wait()   # the rest only once the first half was relayed
        writer.write(body[100_000:] + b"\r\n0\r\n\r\n")
        await writer.drain()

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        response = await upstream.open("POST", "/api/chat", content=b"{}")
        got = b""
        async for piece in upstream.iter_raw(response):
            got += piece
            if len(got) >= 100_000:
                halfway.set()
        await response.aclose()
        await upstream.aclose()
    assert got == body


async def test_a_streamed_request_body_arrives_whole_in_chunks() -> None:
    bodies: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        parts = []
        while (size := int((await reader.readuntil(b"\r\n")).strip(), 16)) != 0:
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        await reader.readexactly(2)
        bodies.append(b"".join(parts))
        writer.write(reply(b"{}"))
        await writer.drain()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(5):
            yield b"piece %d;" % i

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        assert await relayed(upstream, "/api/blobs/sha256:ab", pieces()) == (200, b"{}")
        await upstream.aclose()
    assert bodies == [b"piece 0;piece 1;piece 2;piece 3;piece 4;"]


@pytest.mark.parametrize(("answer", "message"), [
    (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", "ended early"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"SMTP ready\r\n\r\n", "not an HTTP/1.x reply"),
    (b"", "closed before the reply began"),
    # framings that let one reply be read as two are refused, as h11 refused them
    (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
     "framed both by chunks and by its length"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 4\r\n\r\nokok", "differing lengths"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: gzip\r\n\r\n", "not chunked last"),
    (b"HTTP/1.1 200 OK\r\nbogus line\r\n\r\n", "malformed header line"),
    (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n", "switched protocols"),
])
async def test_a_broken_reply_is_an_upstream_protocol_error(answer: bytes, message: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url)
        with pytest.raises(UpstreamProtocolError, match=message):
            await relayed(upstream)
        await upstream.aclose()


async def test_a_reply_framed_by_the_connections_end_is_read_whole_and_not_kept() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
        await writer.drain()

    async with raw_server(handler) as (url, accepted):
        upstream = upstream_at(url)
        assert await relayed(upstream) == (200, b"all of it")
        assert await relayed(upstream) == (200, b"all of it")
        await upstream.aclose()
    assert len(accepted) == 2


async def test_no_reply_in_time_is_a_timeout_and_no_server_is_unavailable() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await anyio.sleep(5)

    async with raw_server(handler) as (url, _):
        upstream = upstream_at(url, GRAPHGATE_READ_TIMEOUT="0.2")
        with pytest.raises(UpstreamTimeout, match="timed out"):
            await relayed(upstream)
        await upstream.aclose()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()   # nothing listens there now
    upstream = upstream_at(f"http://127.0.0.1:{port}")
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await relayed(upstream)
    await upstream.aclose()


async def test_idle_connections_beyond_the_cap_are_closed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await anyio.sleep(0.1)   # every request is in flight at once: one connection each
        writer.write(reply(b"{}"))
        await writer.drain()
        await reader.read()

    async with raw_server(handler) as (url, accepted):
        transport = RelayTransport(max_idle=2)
        async with httpx.AsyncClient(transport=transport, base_url=url) as client:
            responses = await asyncio.gather(*(client.post("/api/chat", content=b"{}") for _ in range(5)))
            assert [r.status_code for r in responses] == [200] * 5
            assert sum(len(stack) for stack in transport._idle.values()) == 2
    assert len(accepted) == 5


def test_streamed_chats_through_the_gateway_reuse_one_upstream_connection(fake: FakeOllama, live_gateway: str) -> None:
    """The whole path: gateway (real uvicorn) -> fake Ollama (real uvicorn), streamed NDJSON."""
    fake.reply = ["one", " two", " three"]
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        for _ in range(3):
            with client.stream("POST", "/api/chat", json={
                    "model": "llama3.2:latest", "messages": [{"role": "user", "content": "hello"}]}) as response:
                lines = [json.loads(line) for line in response.iter_lines() if line]
            assert response.status_code == 200 and lines[-1]["done"] is True
            assert "".join(line["message"]["content"] for line in lines) == "one two three"
    chats = fake.requests_to("/api/chat")
    assert len(chats) == 3 and len({r.client for r in chats}) == 1
