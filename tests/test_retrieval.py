"""Retrieval on a small graph built through the fake upstream: each mode's selection checked against
a brute-force oracle over the stored embeddings, merges, budgets, keywords and /rag/query."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest

from admin.rendering import ref
from proxy.core.settings import Settings
from proxy.core.tokens import get_tokenizer
from proxy.retrieval.select import round_robin, weighted_quota
from proxy.store.postgres.connection import vector_array
from tests.background import background_written
from tests.conftest import gateway_client
from tests.console_helpers import post
from tests.corpus import CITY, CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, fake_embedding
from tests.rag_helpers import CLASSIC, query, settle, store_of, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)


# these tests check LightRAG's classic retrieval against brute-force oracles (CLASSIC);
# tests/test_retrieval_defaults.py covers the defaults
@pytest.fixture
async def kb(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        for name, text in (("team.txt", TEAM), ("city.md", CITY), ("club.txt", CLUB)):
            await settle(client, (await upload(client, name, text))["id"])
        yield client


def oracle(client: httpx.AsyncClient, table: str, text: str, threshold: float = 0.2, top: int = 40) -> list[str]:
    """Brute-force cosine ranking over the stored vectors (names for entities, 'a|b' for relations)."""
    store = store_of(client)
    sql = {"entities": "SELECT name, embedding FROM entities",
           "relations": "SELECT s.name || '|' || t.name, r.embedding FROM relations r JOIN entities s ON s.name_key = "
                        "r.source JOIN entities t ON t.name_key = r.target",
           "chunks": "SELECT id, embedding FROM chunks"}[table]
    rows = store.tables.db.read_sync(lambda c: c.execute(sql).fetchall())
    q = np.asarray(fake_embedding(text, 64))
    # vector_array: a DuckDB list or a pgvector Vector, as float32 (the values stored)
    scored = sorted(((float(np.dot(q, vector_array(e))), name) for name, e in rows), reverse=True)
    return [name for score, name in scored if score >= threshold][:top]


def degrees_sorted(relations: list[dict[str, Any]]) -> bool:
    keys = [(-r["degree"], -r["weight"]) for r in relations]
    return keys == sorted(keys)


@on_both_backends
async def test_local_mode(kb: httpx.AsyncClient) -> None:
    result = await query(kb, query="Tell me about Acme Corp", mode="local", ll_keywords=["Acme Corp"], hl_keywords=[])
    assert [e["name"] for e in result["entities"]] == oracle(kb, "entities", "Acme Corp")
    names = {e["name"] for e in result["entities"]}
    store = store_of(kb)
    incident = {tuple(sorted((s, t))) for s, t in store.tables.db.read_sync(lambda c: c.execute(
        "SELECT s.name, t.name FROM relations r JOIN entities s ON s.name_key = r.source "
        "JOIN entities t ON t.name_key = r.target").fetchall()) if s in names or t in names}
    assert {tuple(sorted((r["source"], r["target"]))) for r in result["relations"]} == incident
    assert degrees_sorted(result["relations"])
    assert all(c["origin"] in ("entity", "relation") for c in result["chunks"])


@on_both_backends
async def test_global_mode(kb: httpx.AsyncClient) -> None:
    result = await query(kb, query="clubs", mode="global", hl_keywords=["chess club"], ll_keywords=[])
    expected = oracle(kb, "relations", "chess club")
    assert sorted(f"{r['source']}|{r['target']}" for r in result["relations"]) == sorted(expected)
    assert degrees_sorted(result["relations"])
    endpoints = list(dict.fromkeys(n for r in result["relations"] for n in (r["source"], r["target"])))
    assert [e["name"] for e in result["entities"]] == endpoints


async def test_hybrid_is_local_and_global_round_robin(kb: httpx.AsyncClient) -> None:
    common = {"query": "q", "ll_keywords": ["Berlin"], "hl_keywords": ["chess club"]}
    local = await query(kb, mode="local", **common)
    global_ = await query(kb, mode="global", **common)
    hybrid = await query(kb, mode="hybrid", **common)
    expected = round_robin([[e["name"] for e in local["entities"]], [e["name"] for e in global_["entities"]]],
                           key=lambda n: n)
    assert [e["name"] for e in hybrid["entities"]] == expected
    pairs = lambda r: [(x["source"], x["target"]) for x in r["relations"]]  # noqa: E731
    unordered = lambda p: tuple(sorted(p))  # noqa: E731
    assert [unordered(p) for p in pairs(hybrid)] == [unordered(p) for p in round_robin(
        [pairs(local), pairs(global_)], key=unordered)]


@on_both_backends
async def test_mix_adds_the_questions_own_chunks(kb: httpx.AsyncClient) -> None:
    text = "Who founded the Berlin chess club?"
    result = await query(kb, query=text, mode="mix", ll_keywords=["Carol White"], hl_keywords=[])
    vector = oracle(kb, "chunks", text)
    chosen = [c["id"] for c in result["chunks"]]
    assert chosen[0] == vector[0]
    assert set(vector) <= set(chosen) and len(chosen) == len(set(chosen))
    assert result["entities"]


async def test_naive_uses_chunks_only_and_no_keyword_call(kb: httpx.AsyncClient, facts: KnownFacts) -> None:
    text = "headquarters in Berlin"
    result = await query(kb, query=text, mode="naive")
    assert result["entities"] == [] and result["relations"] == []
    assert [c["id"] for c in result["chunks"]] == oracle(kb, "chunks", text)[:20]
    assert all(c["origin"] == "vector" for c in result["chunks"])
    assert "keywords" not in facts.calls


async def test_keywords_come_from_the_model_and_are_cached(kb: httpx.AsyncClient, facts: KnownFacts) -> None:
    first = await query(kb, query="What does Acme Corp do?", mode="local")
    assert first["keywords"] == {"high_level": [], "low_level": ["Acme Corp"], "source": "llm"}
    await store_of(kb).save()
    await background_written()  # the cache entry is written in the background
    second = await query(kb, query="What  does Acme Corp do?", mode="local")  # same after normalising
    assert second["keywords"]["source"] == "cache"
    assert facts.calls.count("keywords") == 1


async def test_cached_keywords_deleted_or_cleared_in_the_console_are_asked_for_again(
        kb: httpx.AsyncClient, facts: KnownFacts) -> None:
    """A turn's keywords are served from memory once read (a stored reply costs DuckDB a block's
    decompression); an entry deleted in the console, or its kind cleared, is not served again."""
    ask = "What does Acme Corp do?"
    await query(kb, query=ask, mode="local")
    await background_written()
    assert (await query(kb, query=ask, mode="local"))["keywords"]["source"] == "cache"
    key = next(key for kind, key in await cache_entries(kb) if kind == "keywords")
    assert (await post(kb, f"/admin/cache/keywords/{ref(key)}/delete")).status_code == 303
    assert (await query(kb, query=ask, mode="local"))["keywords"]["source"] == "llm"
    assert facts.calls.count("keywords") == 2
    await background_written()
    assert (await query(kb, query=ask, mode="local"))["keywords"]["source"] == "cache"
    assert (await post(kb, "/admin/cache/keywords/clear")).status_code == 303
    assert (await query(kb, query=ask, mode="local"))["keywords"]["source"] == "llm"
    assert facts.calls.count("keywords") == 3


async def cache_entries(client: httpx.AsyncClient) -> set[tuple[str, str]]:
    cache = client._transport.app.state.gateway.knowledge.cache  # type: ignore[attr-defined]
    rows, _ = await cache.entries("keywords", None, 100, 0)
    return {("keywords", row["key"]) for row in rows}


async def test_follow_up_question_resolves_through_history(kb: httpx.AsyncClient) -> None:
    history = [{"role": "user", "content": "What is Orion?"},
               {"role": "assistant", "content": "Orion is a project run by Acme Corp."}]
    result = await query(kb, query="and who leads it?", history=history, mode="local")
    assert result["keywords"]["low_level"] == ["Acme Corp"] or result["keywords"]["low_level"] == ["Orion"]
    assert "Alice Smith" in {e["name"] for e in result["entities"]} | {
        n for r in result["relations"] for n in (r["source"], r["target"])}


async def test_no_keywords_short_question_becomes_the_keyword(kb: httpx.AsyncClient, facts: KnownFacts) -> None:
    facts.no_keywords = True
    short = await query(kb, query="Berlin", mode="local")
    assert short["keywords"] == {"high_level": [], "low_level": ["Berlin"], "source": "fallback"}
    assert short["entities"]
    long = await query(kb, query="please tell me everything that you might know about all of this " * 2, mode="local")
    assert long["skipped"] == "no keywords in a long question" and long["context"] == ""


async def test_keywords_off_searches_with_the_question(kb: httpx.AsyncClient, facts: KnownFacts) -> None:
    result = await query(kb, query="Acme Corp", mode="hybrid", keywords="off")
    assert result["keywords"]["source"] == "off"
    assert "keywords" not in facts.calls
    assert [e["name"] for e in result["entities"]][:1] == oracle(kb, "entities", "Acme Corp")[:1]


async def test_context_sections_and_references(kb: httpx.AsyncClient) -> None:
    result = await query(kb, query="Berlin chess club", mode="mix", ll_keywords=["Berlin"], hl_keywords=["club"])
    context = result["context"]
    for heading in ("## Entities (knowledge graph)", "## Relations (knowledge graph)", "## Document passages",
                    "## References"):
        assert heading in context
    cited: dict[str, int] = {}
    for chunk in result["chunks"]:
        cited[chunk["documents"][0]] = cited.get(chunk["documents"][0], 0) + 1
    counts = [cited[r["document"]] for r in result["references"]]
    assert counts == sorted(counts, reverse=True) and [r["id"] for r in result["references"]] == list(
        range(1, len(counts) + 1))
    assert "cite" in context.lower() and "language of the user's question" in context


async def test_entity_budget_boundary(kb: httpx.AsyncClient) -> None:
    base = {"query": "q", "mode": "local", "ll_keywords": ["Acme Corp"], "hl_keywords": []}
    full = await query(kb, **base)
    used = full["tokens"]["entities"]
    assert len(full["entities"]) >= 3
    exact = await query(kb, **base, max_entity_tokens=used)
    assert len(exact["entities"]) == len(full["entities"])
    short = await query(kb, **base, max_entity_tokens=used - 1)
    assert len(short["entities"]) == len(full["entities"]) - 1
    assert [e["name"] for e in short["entities"]] == [e["name"] for e in full["entities"]][:-1]  # ranking first
    tiny = await query(kb, **base, max_entity_tokens=1)
    assert [e["name"] for e in tiny["entities"]] == [full["entities"][0]["name"]]  # a section keeps one item


async def test_relation_and_total_budgets(kb: httpx.AsyncClient) -> None:
    base = {"query": "Berlin chess club", "mode": "mix", "ll_keywords": ["Berlin"], "hl_keywords": []}
    full = await query(kb, **base)
    fewer = await query(kb, **base, max_relation_tokens=full["tokens"]["relations"] - 1)
    assert len(fewer["relations"]) == len(full["relations"]) - 1
    small = await query(kb, **base, max_total_tokens=full["tokens"]["total"] - 60)
    # a smaller total scales the sections with it (plan_budget); the passages get what they leave
    assert small["budget"]["relation"] < full["budget"]["relation"] and small["chunks"]
    assert len(small["relations"]) + len(small["chunks"]) < len(full["relations"]) + len(full["chunks"])
    assert get_tokenizer().count(small["context"]) <= small["tokens"]["total"] <= full["tokens"]["total"] - 60


async def test_num_ctx_simulates_a_window(kb: httpx.AsyncClient, settings: Settings) -> None:
    base = {"query": "Berlin", "mode": "mix", "ll_keywords": ["Berlin"], "hl_keywords": []}
    roomy = await query(kb, **base, num_ctx=32768)
    assert roomy["budget"]["window"] == 32768 and roomy["budget"]["total"] == 30000
    small = await query(kb, **base, num_ctx=2048)
    budget = small["budget"]
    assert budget["total"] == 2048 - budget["conversation"] - 1024 - 64
    assert budget["entity"] == int(6000 * budget["total"] / 30000)
    assert budget["relation"] == int(8000 * budget["total"] / 30000)
    assert small["tokens"]["total"] <= budget["total"] + 40
    none = await query(kb, **base, num_ctx=1000)
    assert none["context"] == "" and "leave no room" in none["skipped"]


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "query is required"), ({"query": "x", "mode": "deep"}, "mode must be one of"),
    ({"query": "x", "top_k": 0}, "top_k must be between"), ({"query": "x", "top_k": "5"}, "top_k must be"),
    ({"query": "x", "cosine_threshold": 2}, "cosine_threshold"), ({"query": "x", "num_ctx": -5}, "num_ctx"),
    ({"query": "x", "history": [{"role": "robot", "content": "x"}]}, "history"),
    ({"query": "x", "ll_keywords": "Berlin"}, "ll_keywords must be a list"),
])
async def test_query_bad_input(kb: httpx.AsyncClient, body: dict[str, Any], fragment: str) -> None:
    response = await kb.post("/rag/query", json=body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


async def test_query_with_an_answer(kb: httpx.AsyncClient, fake: FakeOllama) -> None:
    result = await query(kb, query="Who works at Acme Corp?", mode="mix", answer=True)
    assert result["answer"] == "".join(fake.reply)
    sent = [r.json for r in fake.requests_to("/api/chat") if r.json and not r.json.get("format")][-1]
    assert sent["messages"][0]["role"] == "system" and "## Entities" in sent["messages"][0]["content"]


def test_weighted_quota_is_linear_and_prefers_shared_chunks() -> None:
    sources = [["a", "b", "c", "d"], ["b", "e", "f"], ["g", "h"]]
    assert weighted_quota(sources, 3) == ["b", "a", "c", "e", "f", "g"]  # quotas 3, 2, 1


def test_round_robin_dedups() -> None:
    assert round_robin([[1, 2, 3], [2, 4], [5]], key=lambda x: x) == [1, 2, 5, 4, 3]


async def test_an_oversized_only_entity_is_cut_to_its_budget(kb: httpx.AsyncClient) -> None:
    from proxy.core.tokens import get_tokenizer

    result = await query(kb, query="q", mode="local", ll_keywords=["Acme Corp"], hl_keywords=[], max_entity_tokens=12)
    section = result["context"].split("## Entities (knowledge graph)\n")[1].split("\n\n")[0]
    assert len(section.splitlines()) == 1 and get_tokenizer().count(section) <= 12


@on_both_backends
async def test_descriptions_are_the_stored_ones(kb: httpx.AsyncClient) -> None:
    """Descriptions are not kept in memory: a retrieval reads the chosen rows' from DuckDB."""
    store = store_of(kb)
    entities = dict(store.tables.db.read_sync(lambda c: c.execute("SELECT name, description FROM entities").fetchall()))
    relations = {(s, t): d for s, t, d in store.tables.db.read_sync(lambda c: c.execute(
        "SELECT s.name, t.name, r.description FROM relations r JOIN entities s ON s.name_key = r.source "
        "JOIN entities t ON t.name_key = r.target").fetchall())}
    result = await query(kb, query="Berlin chess club", mode="mix", ll_keywords=["Berlin"], hl_keywords=["club"])
    assert result["entities"] and result["relations"]
    for entity in result["entities"]:
        assert entity["description"] and entity["description"] == entities[entity["name"]]
        assert json.dumps(entity["description"], ensure_ascii=False) in result["context"]
    for relation in result["relations"]:
        expected = relations[(relation["source"], relation["target"])]
        assert relation["description"] and relation["description"] == expected
        assert json.dumps(relation["description"], ensure_ascii=False) in result["context"]
    berlin = (await kb.get("/rag/entities/berlin")).json()
    assert berlin["description"] == entities["Berlin"]


@on_both_backends
async def test_a_description_is_found_by_name_once_its_row_was_re_keyed(kb: httpx.AsyncClient) -> None:
    """A commit between a retrieval's vector search and its description read can re-embed (so re-key)
    a row: the description is then found by its name."""
    store = store_of(kb)
    key, name, description = store.tables.db.read_sync(
        lambda c: c.execute("SELECT key, name_key, description FROM entities ORDER BY name_key LIMIT 1").fetchone())
    gone = key + 1_000_000_000  # the key it had before the commit: no row has it now
    assert store.tables.retrieval_rows.descriptions_sync("entities", [(gone, name), (key, name)]) == {
        gone: description, key: description}
