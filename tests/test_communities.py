"""Community summaries (issue 18, item 7): Leiden communities of the graph summarised by the
extraction model when the pipeline is idle, durable, embedded and searchable by the community
channel; only changed communities are summarised again; a failed summary is retried later and
never fails a document. Real engines, the fake upstream.

The channel is searched directly (over the running gateway's store) to see what it finds; a
global /rag/query with the knob on shows the summaries in its context."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from proxy.app import Settings
from proxy.core.limiter import Priority
from proxy.core.modes import Mode
from proxy.knowledge.reindex import reindexing
from proxy.knowledge.service import Knowledge
from proxy.retrieval.channels import channels_for
from proxy.retrieval.channels.communities import CommunityChannel
from proxy.retrieval.found import FoundCommunity
from proxy.retrieval.params import QueryParams
from proxy.retrieval.stages import Question
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)

ENTITIES = {"Nimbus Labs": "Organization", "Cirrus Engine": "Artifact", "Stratus Board": "Artifact",
            "Alto Kit": "Artifact", "Harbor Guild": "Organization", "Quay Market": "Location",
            "Tide School": "Organization", "Orchid Society": "Organization", "Fern Hall": "Location",
            "Petal Fair": "Event"}
NIMBUS = ("Nimbus Labs develops Cirrus Engine. Nimbus Labs develops Stratus Board. "
          "Cirrus Engine runs on Stratus Board.")
HARBOR = "Harbor Guild owns Quay Market. Harbor Guild funds Tide School. Quay Market supplies Tide School."
ORCHID = "Orchid Society meets at Fern Hall. Orchid Society hosts Petal Fair. Petal Fair fills Fern Hall."
ALTO = "Nimbus Labs develops Alto Kit. Alto Kit plugs into Cirrus Engine."


class Summaries:
    """The fake's structured answers: community summaries (naming the members they are given, or
    failing on demand), everything else as a perfect extraction model on ``ENTITIES``."""

    def __init__(self, facts: KnownFacts) -> None:
        self.facts = facts
        self.calls: list[list[str]] = []   # the members described, per community call
        self.order: list[str] = []         # "community" or the extraction's kind, per call
        self.fail = False

    def __call__(self, request: dict[str, Any]) -> str:
        if "title" in ((request.get("format") or {}).get("properties") or {}):
            names = sorted(re.findall(r"^- (.+?) \(", request["messages"][-1]["content"], re.M))
            self.calls.append(names)
            self.order.append("community")
            if self.fail:
                raise FakeOllama.Error(500, "the summary model is down")
            return json.dumps({"title": f"Around {names[0]}", "summary": f"{' and '.join(names)} belong together."})
        answer = self.facts(request)
        self.order.append(self.facts.calls[-1])
        return answer


@pytest.fixture
def summaries(fake: FakeOllama) -> Summaries:
    fake.structured = Summaries(KnownFacts(ENTITIES))
    return fake.structured


@pytest.fixture
def on(settings: Settings) -> Settings:
    return settings.replace(community_summaries=True, llm_retries=1)


def knowledge_of(client: httpx.AsyncClient) -> Knowledge:
    return client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]


@asynccontextmanager
async def gateway(settings: Settings, fake: FakeOllama) -> AsyncIterator[tuple[httpx.AsyncClient, Knowledge]]:
    async with gateway_client(settings, fake) as client:
        kb = knowledge_of(client)
        kb.communities.retry_seconds = 0.05
        yield client, kb


async def ingest(client: httpx.AsyncClient, name: str, text: str) -> dict[str, Any]:
    document = await settle(client, (await upload(client, name, text))["id"])
    assert document["status"] == "processed", document
    return document


async def until(condition: Any, seconds: float = 10) -> None:
    """Wait for ``condition()`` to hold (the job runs in the gateway's task group)."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.01)


async def summarised(kb: Knowledge) -> None:
    """The job has seen the knowledge base as it is, with nothing left to summarise."""
    await until(lambda: not kb.pipeline.busy and kb.communities.up_to_date and kb.communities.status.pending == 0)


async def search(kb: Knowledge, text: str, mode: str = "global") -> list[FoundCommunity]:
    vector = (await kb.models.embed([text], priority=Priority.CHAT))[0]
    params = QueryParams.from_settings(Settings(), mode=mode, communities="on")
    question = Question(text, params, {"query": vector, "high": vector})
    found = await anyio.to_thread.run_sync(CommunityChannel().search, kb.store, question)
    return found.communities


async def stored(kb: Knowledge) -> dict[str, tuple[str, list[str]]]:
    rows = await kb.store.tables.db.read(  # type: ignore[attr-defined]
        lambda c: c.execute("SELECT id, summary, members FROM communities").fetchall())
    return {row[0]: (row[1], sorted(row[2])) for row in rows}


@on_both_backends
async def test_communities_are_summarised_when_idle_and_found_by_the_channel(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await ingest(client, "harbor.txt", HARBOR)
        await summarised(kb)
        communities = await stored(kb)
        assert sorted(members for _, members in communities.values()) == [
            ["cirrus engine", "nimbus labs", "stratus board"], ["harbor guild", "quay market", "tide school"]]
        found = await search(kb, "Nimbus Labs Cirrus Engine Stratus Board products")
        assert found and found[0].entities[0] in ("nimbus labs", "cirrus engine", "stratus board")
        assert all(name in found[0].summary for name in ("Nimbus Labs", "Cirrus Engine", "Stratus Board"))
        assert found[0].title.startswith("Around ") and found[0].score > 0
        stats = (await client.get("/rag/stats")).json()
        assert stats["communities"]["count"] == stats["communities"]["indexed"] == 2
        assert stats["communities"]["job"]["summary_calls"] == 2 and stats["communities"]["job"]["pending"] == 0
        # the channel runs in global, hybrid and mix when the knob is on
        knob_on = QueryParams.from_settings(Settings(), communities="on")
        for mode in (Mode.GLOBAL, Mode.HYBRID, Mode.MIX):
            assert any(isinstance(c, CommunityChannel) for c in channels_for(mode, knob_on))
            assert not any(isinstance(c, CommunityChannel) for c in channels_for(mode, QueryParams()))
        assert not any(isinstance(c, CommunityChannel) for c in channels_for(Mode.LOCAL, knob_on))
        answer = await query(client, query="Which products does Nimbus Labs develop?", mode="global",
                             communities="on", hl_keywords=["Nimbus Labs Cirrus Engine Stratus Board products"])
        assert "Around " in answer["context"] and "belong together" in answer["context"]
        plain = await query(client, query="Which products does Nimbus Labs develop?", mode="global",
                            hl_keywords=["Nimbus Labs Cirrus Engine Stratus Board products"])
        assert "belong together" not in plain["context"]


async def test_an_upload_that_leaves_a_community_alone_does_not_summarise_it_again(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await ingest(client, "harbor.txt", HARBOR)
        await summarised(kb)
        before = list(summaries.calls)
        await ingest(client, "orchid.txt", ORCHID)
        await summarised(kb)
        assert summaries.calls[len(before):] == [["Fern Hall", "Orchid Society", "Petal Fair"]]
        assert len(await stored(kb)) == 3


async def test_documents_arriving_stop_the_job_which_resumes_when_idle(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    """An upload does not wait for the summaries: the call in flight ends, the job stops, the
    document is extracted, and the next idle moment summarises the rest, nothing twice. The fake
    holds the calls so that each step happens at a known point, whatever the machine's load: the
    first summary until the new document is queued, its extraction until the job has stopped."""
    summary_gate = anyio.Event()
    extraction = {"gate": anyio.Event()}   # the first two documents' extractions wait until both are queued

    def hold(request: dict[str, Any]) -> anyio.Event | None:
        if "title" in ((request.get("format") or {}).get("properties") or {}):
            return summary_gate
        return extraction["gate"]

    fake.hold_for = hold
    async with gateway(on, fake) as (client, kb):
        uploads = [await upload(client, name, text) for name, text in (("nimbus.txt", NIMBUS), ("harbor.txt", HARBOR))]
        extraction["gate"].set()
        for document in uploads:
            assert (await settle(client, document["id"]))["status"] == "processed"
        await until(lambda: len(summaries.calls) == 1)   # the first summary is in flight
        extraction_gate = extraction["gate"] = anyio.Event()
        orchid = await upload(client, "orchid.txt", ORCHID)
        await until(lambda: kb.pipeline.busy)
        runs = kb.communities.status.runs
        summary_gate.set()
        await until(lambda: kb.communities.status.runs == runs + 1)   # the run ended: stopped for the document
        assert len(summaries.calls) == 1 and kb.communities.status.pending > 0
        extraction_gate.set()
        assert (await settle(client, orchid["id"]))["status"] == "processed"
        await summarised(kb)
        assert summaries.order.index("extract", summaries.order.index("community")) < \
            [i for i, kind in enumerate(summaries.order) if kind == "community"][1]
        assert sorted(map(tuple, summaries.calls)) == sorted({tuple(c) for c in summaries.calls})   # none twice
        assert len(await stored(kb)) == 3 and kb.communities.status.runs >= 2


@on_both_backends
async def test_deleting_a_document_updates_the_communities_without_extraction(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        harbor = await ingest(client, "harbor.txt", HARBOR)
        alto = await ingest(client, "alto.txt", ALTO)
        await summarised(kb)
        grown = [members for _, members in (await stored(kb)).values()]
        assert ["alto kit", "cirrus engine", "nimbus labs", "stratus board"] in grown
        extractions = list(summaries.facts.calls)
        for document in (alto, harbor):
            assert (await client.delete(f"/rag/documents/{document['id']}")).status_code == 200
        await summarised(kb)
        assert summaries.facts.calls == extractions   # no extraction (nor anything else) asked for
        left = list((await stored(kb)).values())
        assert [members for _, members in left] == [["cirrus engine", "nimbus labs", "stratus board"]]
        assert "Alto Kit" not in left[0][0]
        assert kb.store.vector_count("communities") == 1


async def test_a_failing_summary_is_retried_later_and_never_fails_a_document(
        on: Settings, fake: FakeOllama, summaries: Summaries, caplog: pytest.LogCaptureFixture) -> None:
    summaries.fail = True
    async with gateway(on, fake) as (client, kb):
        with caplog.at_level(logging.WARNING, logger="graphgate.communities"):
            document = await ingest(client, "nimbus.txt", NIMBUS)
            await until(lambda: kb.communities.status.failures >= 3)
        assert document["status"] == "processed"
        assert (await client.get(f"/rag/documents/{document['id']}")).json()["status"] == "processed"
        assert await stored(kb) == {}
        assert kb.communities.status.failing == 1 and kb.communities.status.pending == 1
        logged = [r for r in caplog.records if r.name == "graphgate.communities"]
        assert len(logged) == 1 and "tried again later" in logged[0].getMessage()
        summaries.fail = False
        await summarised(kb)
        assert kb.communities.status.failing == 0 and len(await stored(kb)) == 1


async def test_turned_off_nothing_is_summarised(settings: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(settings, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await ingest(client, "harbor.txt", HARBOR)
        await kb.pipeline.wait_idle()
        assert kb.communities.status.state == "off"
        stats = (await client.get("/rag/stats")).json()
        assert stats["communities"]["count"] == 0 and stats["communities"]["job"]["state"] == "off"
    assert summaries.calls == []


# embedded only: about a lost .usearch file (pgvector's index is in the tables)
async def test_communities_survive_a_restart_and_their_index_is_healed(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await ingest(client, "harbor.txt", HARBOR)
        await summarised(kb)
        before = await stored(kb)
    calls = len(summaries.calls)
    (on.data_dir / "communities.usearch").unlink()
    async with gateway(on, fake) as (client, kb):
        assert kb.store.vector_count("communities") == 2   # healed from the table at start-up
        await summarised(kb)
        assert await stored(kb) == before and len(summaries.calls) == calls   # the same partition: kept
        found = await search(kb, "Harbor Guild Quay Market Tide School")
        assert found[0].entities and set(found[0].entities) == {"harbor guild", "quay market", "tide school"}


@on_both_backends
async def test_reembedding_for_a_new_model_writes_the_summaries_again_from_the_cache(
        on: Settings, fake: FakeOllama, summaries: Summaries, live_upstream: str) -> None:
    """``graphgate reindex`` with a new embedding model drops the (derived) summaries; the next idle
    run writes them again from the LLM cache: new embeddings, no new summary call."""
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await summarised(kb)
        before = await stored(kb)
    fake.models["bigger-embed:latest"] = dict(fake.models["nomic-embed-text:latest"], name="bigger-embed:latest",
                                              model="bigger-embed:latest")
    fake.embed_dims["bigger-embed:latest"] = 128
    bigger = on.replace(embed_model="bigger-embed")
    async with reindexing(bigger.replace(upstream=live_upstream)) as run:
        sizes = await run(lambda *_: None)
    assert sizes["communities"] == 0
    calls = len(summaries.calls)
    async with gateway(bigger, fake) as (client, kb):
        await summarised(kb)
        assert await stored(kb) == before and len(summaries.calls) == calls
        assert kb.store.vector_count("communities") == 1
        assert kb.store.vectors_sync("communities", kb.store.vector_keys_sync("communities").tolist()).shape[1] == 128


async def test_the_dashboard_shows_the_communities_when_the_job_runs(
        on: Settings, fake: FakeOllama, summaries: Summaries) -> None:
    async with gateway(on, fake) as (client, kb):
        await ingest(client, "nimbus.txt", NIMBUS)
        await summarised(kb)
        page = (await client.get("/admin/")).text
        assert re.search(r'id="count-communities">1<', page) and "0 to summarise" in page
