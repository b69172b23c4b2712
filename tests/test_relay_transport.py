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


async def test_a_kept_connection_the_server_closed_meanwhile_is_replaced_and_the_request_sent_once() -> None:
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
        assert await relayed(upstream) == (200, b'{"n": 1}')
        assert await relayed(upstream, content=b'{"second": 1}') == (200, b'{"n": 1}')
        await upstream.aclose()
    assert len(accepted) == 2 and received[1].endswith(b'{"second": 1}')


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
