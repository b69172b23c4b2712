"""Several upstreams (GRAPHGATE_UPSTREAM with a list): a chat goes to an upstream that has its
model, the least busy one; GraphGate's own calls spread over those that have the model; one that
cannot be reached is skipped (its request tried on another) and used again once it answers;
/rag/health and /metrics show each.

The upstreams are fake Ollamas: in-process, each behind a transport that can be unplugged (httpx's
own connection error, as a stopped server gives), or real servers on 127.0.0.1 with one a closed
port.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import Settings, create_app
from proxy.core.settings import SettingsError
from proxy.upstream import pool
from proxy.upstream.pool import Upstreams
from tests.conftest import running
from tests.corpus import PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload
from tests.test_health import closed_port

pytestmark = pytest.mark.anyio

A, B, C = "http://127.0.0.1:11501", "http://127.0.0.1:11502", "http://127.0.0.1:11503"


class Unpluggable(httpx.AsyncBaseTransport):
    """A fake's transport whose cable can be pulled: then every request fails to connect."""

    def __init__(self, fake: FakeOllama) -> None:
        self.inner, self.down, self.blackholed = fake.transport(), False, False
        self.tried: list[str] = []   # the paths of the requests that came to the cable

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.tried.append(request.url.path)
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if self.blackholed:   # a firewalled host: no connection within the connect timeout
            raise httpx.ConnectTimeout("timed out", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def gateway(settings: Settings, fakes: dict[str, FakeOllama]
                  ) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Unpluggable], Upstreams]]:
    cables = {url: Unpluggable(fake) for url, fake in fakes.items()}
    app = create_app(settings.replace(upstream=",".join(fakes)), upstream_transports=cables)
    async with running(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:11435",
                                     timeout=30) as client:
            upstream = app.state.gateway.upstream
            assert isinstance(upstream, Upstreams)
            yield client, cables, upstream


def chats(fake: FakeOllama) -> list[Any]:
    return [r.json for r in fake.requests_to("/api/chat")]


def chat(model: str, text: str = "Hello?") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": False}


def extraction_calls(fake: FakeOllama) -> int:
    return sum(1 for body in chats(fake) if body and body.get("format"))


def embed_calls(fake: FakeOllama) -> int:
    return len(fake.requests_to("/api/embed"))


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, str], float]:
    """Each series with an ``upstream`` label by name and upstream, summed over its other labels."""
    text = (await client.get("/metrics")).text
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "upstream" in sample.labels:
                key = (sample.name, sample.labels["upstream"])
                samples[key] = samples.get(key, 0.0) + sample.value
    return samples


def test_the_setting_takes_a_list_and_checks_each_url(tmp_path) -> None:
    loaded = Settings.load(environ={"GRAPHGATE_UPSTREAM": f" {A}/ ,{B},{A}", "GRAPHGATE_DATA_DIR": str(tmp_path)})
    assert loaded.upstream == f"{A},{B}"   # trailing slash, spaces and the repeated one dropped
    with pytest.raises(SettingsError, match="GRAPHGATE_UPSTREAM"):
        Settings.load(environ={"GRAPHGATE_UPSTREAM": f"{A},ftp://x", "GRAPHGATE_DATA_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match="GRAPHGATE_UPSTREAM"):
        Settings.load(environ={"GRAPHGATE_UPSTREAM": " , ", "GRAPHGATE_DATA_DIR": str(tmp_path)})


async def test_a_chat_goes_to_the_upstream_that_has_its_model(settings: Settings) -> None:
    a, b = FakeOllama(), FakeOllama()
    del a.models["qwen3:latest"]   # only B has qwen3
    async with gateway(settings, {A: a, B: b}) as (client, _, _):
        tags = (await client.get("/api/tags")).json()
        names = [m["name"] for m in tags["models"]]
        assert sorted(names) == ["llama3.2:latest", "nomic-embed-text:latest", "qwen3:latest"]   # merged, once each
        for _ in range(4):
            response = await client.post("/api/chat", json=chat("qwen3"))
            assert response.status_code == 200, response.text
        assert len(chats(b)) == 4 and chats(a) == []
        # a model both have: the calls are spread over both
        for _ in range(4):
            assert (await client.post("/api/chat", json=chat("llama3.2"))).status_code == 200
        assert len(chats(a)) == 2 and len(chats(b)) == 6


async def test_chats_go_to_the_less_busy_upstream(settings: Settings) -> None:
    # a minute of answer: the stream is still out however long the other chats take on a busy machine
    a, b = (FakeOllama(chunk_delay=0.1, reply=[f"w{i} " for i in range(600)]) for _ in range(2))
    async with gateway(settings, {A: a, B: b}) as (client, _, upstreams):
        await client.get("/api/tags")   # the models each lists

        async def stream() -> None:
            async with client.stream("POST", "/api/chat", json={**chat("llama3.2"), "stream": True}) as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    pass

        async with anyio.create_task_group() as group:
            group.start_soon(stream)   # on one of them
            with anyio.fail_after(30):
                while not any(m.in_flight for m in upstreams.members):
                    await anyio.sleep(0.01)
            busy = next(m for m in upstreams.members if m.in_flight)
            for _ in range(3):   # meanwhile every chat goes to the other one
                assert (await client.post("/api/chat", json=chat("llama3.2"))).status_code == 200
            assert busy.in_flight == 1
            busy_fake, idle_fake = (a, b) if busy.url == A else (b, a)
            assert len(chats(busy_fake)) == 1 and len(chats(idle_fake)) == 3
            a.chunk_delay = b.chunk_delay = 0   # the rest of the answer at once: the stream ends as it would
        assert [m.in_flight for m in upstreams.members] == [0, 0]   # every slot given back at the end


async def test_one_upstream_down_chats_and_ingestion_go_on_and_it_comes_back(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "FIRST_RETRY", 0.3)
    a, b = FakeOllama(), FakeOllama()
    a.structured = b.structured = KnownFacts(PEOPLE)
    async with gateway(settings, {A: a, B: b}) as (client, cables, upstreams):
        health = (await client.get("/rag/health")).json()
        assert [u["reachable"] for u in health["upstreams"]] == [True, True]
        cables[A].down = True
        # every chat is answered: one that found A down is sent to B
        for _ in range(4):
            response = await client.post("/api/chat", json=chat("llama3.2"))
            assert response.status_code == 200, response.text
        assert chats(a) == [] and len(chats(b)) == 4
        # ingestion carries on: every extraction and embedding call on B
        document = await upload(client, "team.txt", TEAM)
        assert (await settle(client, document["id"]))["status"] == "processed"
        assert extraction_calls(b) >= 1 and embed_calls(b) >= 1
        assert extraction_calls(a) == 0 and embed_calls(a) == 0
        report = await client.get("/rag/health")
        assert report.status_code == 200   # ready: one upstream is enough
        by_url = {u["url"]: u for u in report.json()["upstreams"]}
        assert by_url[A]["reachable"] is False and "unreachable" in by_url[A]["error"]
        assert by_url[B]["reachable"] is True and by_url[B]["models"] == 3 and by_url[B]["failures"] == 0
        assert by_url[A]["failures"] >= 1
        fragment = (await client.get("/admin/fragments/health")).text   # the console's dashboard
        assert f"<code>{A}</code>: <span class=\"error\">down (" in fragment
        assert f"<code>{B}</code>: <span class=\"ok\">up</span>" in fragment
        samples = await scrape(client)
        assert samples[("graphgate_upstream_up", A)] == 0 and samples[("graphgate_upstream_up", B)] == 1
        assert samples[("graphgate_upstream_routed_total", B)] >= 4
        assert samples[("graphgate_upstream_connect_failures_total", A)] >= 1
        # the per-call series name the upstream that answered: B's chats, extraction and embeddings
        assert samples[("graphgate_upstream_requests_total", B)] >= 4 + 2
        assert samples[("graphgate_upstream_requests_total", A)] == 0   # (its series are there from the start)

        cables[A].down = False   # back: after its back-off it gets its share again
        with anyio.fail_after(10):
            while not chats(a):
                assert (await client.post("/api/chat", json=chat("llama3.2"))).status_code == 200
                await anyio.sleep(0.1)
        assert upstreams.members[0].reachable is True
        assert (await scrape(client))[("graphgate_upstream_up", A)] == 1


async def test_all_down_is_not_ready_and_the_error_is_the_upstreams(settings: Settings) -> None:
    a, b = FakeOllama(), FakeOllama()
    async with gateway(settings, {A: a, B: b}) as (client, cables, _):
        cables[A].down = cables[B].down = True
        response = await client.post("/api/chat", json=chat("llama3.2"))
        assert response.status_code == 502 and "unreachable" in response.json()["error"]
        health = await client.get("/rag/health")
        assert health.status_code == 503 and health.json()["ready"] is False
        assert [u["reachable"] for u in health.json()["upstreams"]] == [False, False]


async def test_model_management_goes_to_the_first_reachable_upstream(settings: Settings) -> None:
    a, b, c = FakeOllama(), FakeOllama(), FakeOllama()
    async with gateway(settings, {A: a, B: b, C: c}) as (client, cables, _):
        await client.get("/api/tags")
        cables[A].down = True
        response = await client.post("/api/pull", json={"model": "tinyllama", "stream": False})
        assert response.status_code == 200, response.text
        assert b.requests_to("/api/pull") and not c.requests_to("/api/pull")


async def test_real_servers_one_a_closed_port(settings: Settings, fake: FakeOllama) -> None:
    """Over the network (the lean JSON client for GraphGate's own calls, httpx for relays)."""
    fake.structured = KnownFacts(PEOPLE)
    dead = f"http://127.0.0.1:{closed_port()}"
    with fake.serve() as live:
        app = create_app(settings.replace(upstream=f"{dead},{live}"), watch_seconds=0)
        async with running(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://127.0.0.1:11435", timeout=30) as client:
                response = await client.post("/api/chat", json=chat("llama3.2"))
                assert response.status_code == 200, response.text
                document = await upload(client, "team.txt", TEAM)
                assert (await settle(client, document["id"]))["status"] == "processed"
                assert extraction_calls(fake) >= 1
                health = (await client.get("/rag/health")).json()
                assert health["ready"] is True
                assert [(u["url"], u["reachable"]) for u in health["upstreams"]] == [(dead, False), (live, True)]


async def test_one_upstream_is_shown_alone_and_not_pooled(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings, upstream_transport=fake.transport())
    async with running(app):
        assert type(app.state.gateway.upstream) is not Upstreams   # the plain client: nothing chosen per request
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://127.0.0.1:11435") as client:
            health = (await client.get("/rag/health")).json()
            assert health["upstreams"] == [{"url": "http://127.0.0.1:11434", "reachable": True, "version": "0.12.3",
                                            "models": 3, "in_flight": None, "requests": None, "failures": None,
                                            "error": None}]
            samples = await scrape(client)
            assert samples[("graphgate_upstream_up", "http://127.0.0.1:11434")] == 1
            assert ("graphgate_upstream_in_flight", "http://127.0.0.1:11434") not in samples   # the pool's own
            assert {url for _, url in samples} == {"http://127.0.0.1:11434"}   # every call is labelled with it


async def test_an_upstream_that_cannot_be_connected_to_in_time_is_skipped(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "FIRST_RETRY", 0.05)
    a, b = FakeOllama(), FakeOllama()
    a.structured = b.structured = KnownFacts(PEOPLE)
    async with gateway(settings, {A: a, B: b}) as (client, cables, upstreams):
        cables[A].blackholed = True
        for _ in range(3):
            response = await client.post("/api/chat", json=chat("llama3.2"))
            assert response.status_code == 200, response.text
        document = await upload(client, "team.txt", TEAM)
        assert (await settle(client, document["id"]))["status"] == "processed"
        assert chats(a) == [] and extraction_calls(b) >= 1
        assert upstreams.members[0].reachable is False and "timed out" in (upstreams.members[0].last_error or "")
        # past its back-off it is checked in the background; clients' requests never wait on it
        cables[A].tried.clear()
        with anyio.fail_after(30):   # chats go on until its back-off has passed and it was checked
            while "/api/version" not in cables[A].tried:
                assert (await client.post("/api/chat", json=chat("llama3.2"))).status_code == 200
                await anyio.sleep(0.1)
        assert "/api/chat" not in cables[A].tried
        assert chats(a) == []
