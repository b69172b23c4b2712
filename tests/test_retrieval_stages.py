"""Retrieval's stages: the mode table of the channels, a channel added by registration, fusion of
any number of chunk lists, the async reranker hook, and the knobs made from the settings table."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from proxy.core.modes import MODES, Mode
from proxy.core.settings import SETTINGS, Settings
from proxy.retrieval import channels as registry
from proxy.retrieval.channels import channels_for
from proxy.retrieval.found import ChunkHit, Found, FoundChunk
from proxy.retrieval.fusion import fuse_chunks
from proxy.retrieval.params import CHOICE_KNOBS, KNOBS, NUMBER_KNOBS, QueryParams, knob_of
from proxy.retrieval.select import round_robin
from proxy.retrieval.stages import Question
from proxy.store.store import KnowledgeStore
from tests.conftest import gateway_client
from tests.corpus import CITY, CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)


@pytest.fixture
async def kb(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        for name, text in (("team.txt", TEAM), ("city.md", CITY), ("club.txt", CLUB)):
            await settle(client, (await upload(client, name, text))["id"])
        yield client


def retriever_of(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.gateway.knowledge.retriever  # type: ignore[attr-defined]


def test_each_mode_runs_its_declared_channels() -> None:
    names = {mode: [channel.name for channel in channels_for(mode)] for mode in Mode}   # the defaults
    assert names == {Mode.LOCAL: ["linked", "expansion", "described", "entities"], Mode.GLOBAL: ["linked", "relations"],
                     Mode.HYBRID: ["linked", "expansion", "described", "entities", "relations"],
                     Mode.MIX: ["linked", "expansion", "described", "entities", "relations", "chunks"],
                     Mode.NAIVE: ["chunks"], Mode.BYPASS: []}
    classic = QueryParams.from_settings(Settings(), linking="off", expansion="off")   # LightRAG's own channels
    names = {mode: [channel.name for channel in channels_for(mode, classic)] for mode in Mode}
    assert names == {Mode.LOCAL: ["entities"], Mode.GLOBAL: ["relations"], Mode.HYBRID: ["entities", "relations"],
                     Mode.MIX: ["entities", "relations", "chunks"], Mode.NAIVE: ["chunks"], Mode.BYPASS: []}


def test_fusion_round_robins_any_number_of_chunk_lists() -> None:
    lists = [[ChunkHit("a", 0.9), ChunkHit("b", 0.8)], [ChunkHit("c", 0, "entity")],
             [ChunkHit("a", 0, "relation"), ChunkHit("d", 0, "relation")], [ChunkHit("e", 0, "extra")]]
    assert [(h.id, h.origin) for h in fuse_chunks(lists, 10)] == [
        ("a", "vector"), ("c", "entity"), ("e", "extra"), ("b", "vector"), ("d", "relation")]
    assert [h.id for h in fuse_chunks(lists, 3)] == ["a", "c", "e"]


class FirstChunks:
    """A channel by rule: every chunk, by id, read through the store's public API."""
    name = "first-chunks"
    vector = "query"

    def search(self, store: KnowledgeStore, question: Question) -> Found:
        ids = store.read_memory_sync(lambda rows, graph: sorted(rows.chunk_keys))
        return Found(chunks=[ChunkHit(i, 1.0, "first") for i in ids])


async def test_a_registered_channel_runs_in_its_modes_and_is_fused(kb: httpx.AsyncClient,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    common = {"query": "headquarters in Berlin", "mode": "naive", "chunk_top_k": 5}
    before = await query(kb, **common)
    monkeypatch.setattr(registry, "CHANNELS", (*registry.CHANNELS, (FirstChunks(), frozenset({Mode.NAIVE}))))
    after = await query(kb, **common)
    first = sorted({c["id"] for c in (await query(kb, query="x", mode="naive", cosine_threshold=0))["chunks"]})
    assert len(first) > len(before["chunks"])  # the rule finds a chunk the question does not
    expected = round_robin([[c["id"] for c in before["chunks"]], first], key=lambda i: i)[:5]
    assert [c["id"] for c in after["chunks"]] == expected
    assert [c["id"] for c in after["chunks"]] != [c["id"] for c in before["chunks"]]
    assert {c["origin"] for c in after["chunks"]} == {"vector", "first"}
    local = await query(kb, query="q", mode="local", ll_keywords=["Berlin"], hl_keywords=[])
    assert all(c["origin"] != "first" for c in local["chunks"])  # not registered for local


def passages(result: dict[str, Any]) -> list[str]:
    """The chunk contents in the context, in their order there."""
    return [json.loads(line)["content"] for line in result["context"].splitlines()
            if line.startswith('{"reference_id"')]


class Reverse:
    """A reranker by rule: the fused chunks in reverse order (awaited between the blocking stages)."""
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def rerank(self, question: Question, chunks: list[FoundChunk]) -> list[FoundChunk]:
        await anyio.lowlevel.checkpoint()
        self.calls.append(question.text)
        return list(reversed(chunks))


class Shortest:
    """Re-scores by a rule: the shortest passages first, only the best two kept."""
    async def rerank(self, question: Question, chunks: list[FoundChunk]) -> list[FoundChunk]:
        return sorted(chunks, key=lambda c: (len(c.content), c.id))[:2]


async def test_a_registered_reranker_is_awaited_and_reorders_the_chunks(kb: httpx.AsyncClient) -> None:
    common = {"query": "Who founded the Berlin chess club?", "mode": "mix", "ll_keywords": ["Carol White"],
              "hl_keywords": ["chess club"]}
    plain = await query(kb, **common)
    assert len(plain["chunks"]) >= 2 and "rerank" not in plain["timings"]
    retriever = retriever_of(kb)
    retriever.reranker = reverse = Reverse()
    reversed_ = await query(kb, **common)
    assert reverse.calls == [common["query"]]
    assert [c["id"] for c in reversed_["chunks"]] == [c["id"] for c in reversed(plain["chunks"])]
    assert "rerank" in reversed_["timings"]
    assert passages(reversed_) == [c["content"] for c in reversed_["chunks"]] != passages(plain)
    retriever.reranker = Shortest()
    shortest = await query(kb, **common)
    expected = sorted(plain["chunks"], key=lambda c: (len(c["content"]), c["id"]))[:2]
    assert [c["id"] for c in shortest["chunks"]] == [c["id"] for c in expected]


def test_the_knobs_are_the_settings_rows_with_a_knob() -> None:
    assert [s.name for s in KNOBS] == [s.name for s in SETTINGS if s.knob is not None] == [
        "mode", "top_k", "chunk_top_k", "max_entity_tokens", "max_relation_tokens", "max_total_tokens",
        "cosine_threshold", "related_chunks", "chunk_selection", "keywords", "fusion", "linking",
        "expansion", "relation_ranking", "keyword_search", "context_layout", "communities", "keyword_budget", "effort"]
    knob_fields = {f.name for f in dataclasses.fields(QueryParams)} - {"hl_keywords", "ll_keywords", "instructions",
                                                                        "filters", "extra"}
    assert knob_fields == {s.name for s in KNOBS}
    settings = Settings().replace(top_k=7, mode="naive", cosine_threshold=0.5)
    params = QueryParams.from_settings(settings, chunk_top_k=3)
    assert (params.top_k, params.mode, params.cosine_threshold, params.chunk_top_k) == (7, "naive", 0.5, 3)
    assert QueryParams() == QueryParams.from_settings(Settings())
    assert next(knob_of(s).choices for s in CHOICE_KNOBS if s.name == "mode") == MODES == tuple(Mode)
    assert {s.name for s in NUMBER_KNOBS} | {s.name for s in CHOICE_KNOBS} == {s.name for s in KNOBS}


def test_a_knob_parses_its_setting_within_its_bounds() -> None:
    knobs = {s.name: s for s in KNOBS}
    assert knobs["top_k"].parse("12") == 12 and knobs["cosine_threshold"].parse("0.3") == 0.3
    for name, raw, message in (("top_k", "0", "expected a whole number from 1 to 1000"),
                               ("cosine_threshold", "1.5", "expected a number from 0 to 1"),
                               ("mode", "deep", "expected one of local, global, hybrid, mix, naive, bypass")):
        with pytest.raises(ValueError, match=message):
            knobs[name].parse(raw)


async def test_the_playground_form_is_made_from_the_knobs(kb: httpx.AsyncClient) -> None:
    from admin.routes_playground import CHOICES, knobs

    assert [k["name"] for k in knobs()] == [s.name for s in NUMBER_KNOBS]
    top_k = next(k for k in knobs() if k["name"] == "top_k")
    assert top_k == {"name": "top_k", "help": "Entities / relations taken from the vector search.", "low": "1",
                     "high": "1000", "step": "1"}
    assert CHOICES == {"mode": MODES, "chunk_selection": ("vector", "weight"), "keywords": ("llm", "off"),
                       "fusion": ("roundrobin", "rrf"), "linking": ("on", "off"),
                       "expansion": ("off", "ppr", "chains"), "relation_ranking": ("degree", "question"),
                       "keyword_search": ("on", "off"),
                       "context_layout": ("sections", "evidence"), "communities": ("on", "off"),
                       "effort": ("full", "light")}
