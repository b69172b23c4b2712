"""Under a burst of chats a retrieval runs light (GRAPHGATE_BURST_RETRIEVALS): the PageRank expansion
gives way to the chain walk, the keyword call and the vector reads beyond the searches are shed, so
that every turn stays quick, and it says so; alone, it never does."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.chat_helpers import ingest
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query

pytestmark = pytest.mark.anyio

QUESTION = {"query": "Who works at Acme Corp?", "mode": "mix", "keywords": "off"}


async def while_one_is_held(client: httpx.AsyncClient, fake: FakeOllama, **second: Any) -> dict[str, Any]:
    """A second query's result while a first waits for its (held) keyword call, in flight."""
    retriever = client._transport.app.state.gateway.knowledge.retriever  # type: ignore[attr-defined]
    fake.hold_structured = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(query, client, query="Where is Acme Corp?", mode="mix"))
        with anyio.fail_after(10):
            while retriever.in_flight < 1:   # the first is under way, waiting for its keyword call
                await anyio.sleep(0.01)
        result = await query(client, **{**QUESTION, **second})
        fake.hold_structured.set()
    return result


async def test_a_retrieval_beside_others_runs_light(settings: Settings, fake: FakeOllama,
                                                             facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(burst_retrievals=1), fake) as client:
        await ingest(client)
        alone = await query(client, **QUESTION)
        assert "shed" not in alone and "expansion" in alone["channels"]
        busy = await while_one_is_held(client, fake)
        assert busy["shed"] == ("expansion (chains), chunk_selection (weight) and relation vectors "
                                "(2 retrievals in flight)")
        assert "expansion" not in busy["channels"] and "chains" in busy["channels"]
        assert busy["context"] and "Acme Corp" in busy["context"]   # still grounded


async def test_never_shed_when_the_setting_is_zero(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(burst_retrievals=0), fake) as client:
        await ingest(client)
        busy = await while_one_is_held(client, fake)
        assert "shed" not in busy and "expansion" in busy["channels"]


async def test_the_light_path_asked_for_alone(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    """``effort: light`` takes the burst's light path on a quiet gateway: the chain walk for the
    expansion, no keyword call to the model, nothing said to be shed (nothing was in flight); still
    grounded. A bad value is refused."""
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        asked = len(fake.requests_to("/api/chat"))
        light = await query(client, query="Who works at Acme Corp?", mode="mix", effort="light")
        assert len(fake.requests_to("/api/chat")) == asked   # the question's keywords were not asked for
        assert "shed" not in light and "expansion" not in light["channels"] and light["keywords"]["source"] == "off"
        assert "chains" in light["channels"]
        assert light["context"] and "Acme Corp" in light["context"]
        full = await query(client, query="Who works at Acme Corp?", mode="mix")
        assert "expansion" in full["channels"] and len(fake.requests_to("/api/chat")) == asked + 1
        refused = await client.post("/rag/query", json={"query": "Who works at Acme Corp?", "effort": "fast"})
        assert refused.status_code == 400 and refused.json() == {"error": "effort must be one of full, light"}


async def test_the_light_path_without_its_chain_walk(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    """``light_expansion=off``: the light path drops the expansion altogether (the quickest turns)."""
    async with gateway_client(settings.replace(light_expansion="off"), fake) as client:
        await ingest(client)
        light = await query(client, query="Who works at Acme Corp?", mode="mix", effort="light")
        assert not {"chains", "expansion"} & set(light["channels"]) and "Acme Corp" in light["context"]
        full = await query(client, query="Who works at Acme Corp?", mode="mix")
        assert "expansion" in full["channels"]
