"""The model lists during an upstream outage (issue 30, item 6): /api/tags kept listing every model
from a saved copy while /v1/models answered 502. Both are now made from one list, the upstream's
/api/tags (as Ollama makes its own /v1/models): while the upstream is up they name the same models,
knowledge models included; while it is down or slow both answer its last good list, marked
``X-GraphGate-Stale: 1``, and a chat with a listed model gets the 502 that says why; what only a
running upstream knows (/api/ps, /api/show) answers that 502; a gateway that never saw the list
answers 502 on both. The upstream is the fake Ollama on a real socket, stopped for the outage."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.core.settings import Settings
from tests.conftest import running
from tests.fake_ollama import FakeOllama
from tests.test_health import closed_port

pytestmark = pytest.mark.anyio

MODEL = "llama3.2:latest"


@contextlib.asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running(create_app(settings, watch_seconds=0)) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435", timeout=30) as client:
            yield client


def names(tags: httpx.Response) -> set[str]:
    return {m["name"] for m in tags.json()["models"]}


def ids(models: httpx.Response) -> set[str]:
    return {m["id"] for m in models.json()["data"]}


async def lists(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
    return await client.get("/api/tags"), await client.get("/v1/models")


async def test_the_lists_agree_while_the_upstream_is_up_and_while_it_is_down(settings: Settings) -> None:
    fake = FakeOllama()
    with contextlib.ExitStack() as upstream:
        url = upstream.enter_context(fake.serve())
        async with gateway(settings.replace(upstream=url)) as client:
            put = await client.put("/rag/models/hr-bot", json={"model": MODEL, "kb": "default"})
            assert put.status_code == 201, put.text
            tags, models = await lists(client)
            assert tags.status_code == models.status_code == 200
            assert names(tags) == ids(models) and {MODEL, "hr-bot:latest"} <= names(tags)
            assert "x-graphgate-stale" not in tags.headers and "x-graphgate-stale" not in models.headers
            assert {m["name"] for m in fake.models.values()} | {"hr-bot:latest"} == names(tags)
            live = {m["id"]: m for m in models.json()["data"]}
            assert live[MODEL]["object"] == "model" and live[MODEL]["owned_by"] == "library"
            assert isinstance(live[MODEL]["created"], int) and live[MODEL]["created"] > 0

            upstream.close()   # the upstream stops: connections are refused from now on

            stale_tags, stale_models = await lists(client)
            assert stale_tags.status_code == stale_models.status_code == 200
            assert stale_tags.headers["x-graphgate-stale"] == stale_models.headers["x-graphgate-stale"] == "1"
            assert names(stale_tags) == ids(stale_models) == names(tags)   # the same models, knowledge models too
            assert stale_models.json()["data"] == models.json()["data"]
            one = await client.get(f"/v1/models/{MODEL}")
            alias = await client.get("/v1/models/hr-bot:latest")
            assert one.status_code == alias.status_code == 200 and one.headers["x-graphgate-stale"] == "1"
            assert one.json() == live[MODEL] and alias.json()["id"] == "hr-bot:latest"
            assert (await client.get("/v1/models/ghost:latest")).status_code == 502   # not listed: the outage says

            # what only a running upstream knows, and a chat with a listed model, say why they cannot answer
            for response in (await client.get("/api/ps"), await client.post("/api/show", json={"model": MODEL}),
                             await client.post("/api/chat", json={"model": MODEL, "stream": False, "messages": [
                                 {"role": "user", "content": "hi"}]})):
                assert response.status_code == 502, response.text
                assert f"upstream Ollama at {url} is unreachable" in response.json()["error"]
            chat = await client.post("/v1/chat/completions", json={"model": "hr-bot", "messages": [
                {"role": "user", "content": "hi"}]})
            assert chat.status_code == 502 and "unreachable" in chat.json()["error"]["message"]


async def test_a_slow_upstream_gives_the_saved_list_on_both(settings: Settings, fake: FakeOllama) -> None:
    from tests.conftest import gateway_client

    async with gateway_client(settings.replace(discovery_timeout=0.5), fake) as client:
        tags, models = await lists(client)
        fake.hang_paths.add("/api/tags")
        slow_tags, slow_models = await lists(client)
    assert slow_tags.status_code == slow_models.status_code == 200
    assert slow_tags.headers["x-graphgate-stale"] == slow_models.headers["x-graphgate-stale"] == "1"
    assert slow_tags.json() == tags.json() and slow_models.json() == models.json()


async def test_a_gateway_that_never_saw_the_list_answers_502_on_both(settings: Settings) -> None:
    port = closed_port()
    async with gateway(settings.replace(upstream=f"http://127.0.0.1:{port}")) as client:
        tags, models = await lists(client)
    assert tags.status_code == models.status_code == 502
    message: Any = models.json()["error"]["message"]   # OpenAI's error shape on /v1
    assert tags.json()["error"] == message and "unreachable" in message
