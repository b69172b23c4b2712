"""Fusion by reciprocal rank (the ``fusion`` knob) and the optional re-ranking stage speaking
``/v1/rerank`` (GRAPHGATE_RERANK_URL): its order and scores when it answers, the fused order with
the reason in the trace when it is down, slow or answers garbage, and no call at all by default."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.core.settings import SETTINGS_BY_NAME, Settings
from proxy.retrieval.found import ChunkHit
from proxy.retrieval.fusion import FUSIONS, fuse, fuse_chunks, reciprocal_rank
from proxy.retrieval.params import knob_of
from proxy.retrieval.rerank_http import rerank_endpoint
from proxy.retrieval.select import round_robin
from tests.chat_helpers import MODEL, traces
from tests.conftest import gateway_client, running
from tests.corpus import CITY, CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, overlap_score
from tests.rag_helpers import query, settle, upload
from tests.servers import silent_port

pytestmark = pytest.mark.anyio

# the names' documents, and prose without a name that shares the question's words
DOCUMENTS = {
    "team.txt": TEAM, "city.md": CITY,
    "club.txt": CLUB,
    "rooms.txt": "Who founded a chess club matters less than who books the room and buys the boards for the club.",
    "tax.txt": "Where a company keeps its headquarters is often chosen for taxes more than for the city.",
    "sunday.txt": "Bob Jones plays chess on Sundays with Alice Smith in Berlin.",
}
# classic retrieval (no linking or expansion): its fused chunk order is one the re-ranker's differs from
QUESTION: dict[str, Any] = {"query": "Who founded the Berlin chess club?", "ll_keywords": ["Carol White", "Berlin"],
            "hl_keywords": ["chess club"], "mode": "mix", "chunk_top_k": 4, "linking": "off", "expansion": "off"}
RERANK_URL = "http://rerank.test"  # in-process the fake upstream's transport serves it too


def ids(items: list[Any]) -> list[str]:
    return [item.id if isinstance(item, ChunkHit) else item for item in items]


# --- reciprocal rank fusion on plain lists ---

def test_lists_that_share_nothing_fuse_as_round_robin() -> None:
    lists = [["a", "b", "c"], ["d"], ["e", "f"]]
    assert reciprocal_rank(lists, key=str) == round_robin(lists, key=str) == ["a", "d", "e", "b", "f", "c"]


def test_an_item_several_lists_hold_rises() -> None:
    lists = [["a", "b", "c"], ["c", "d"]]
    # c: 1/63 + 1/61; a: 1/61; b and d: 1/62 each, tied: round-robin's order (b's list comes first)
    assert reciprocal_rank(lists, key=str) == ["c", "a", "b", "d"]
    assert round_robin(lists, key=str) == ["a", "c", "b", "d"]


def test_a_duplicate_inside_one_list_counts_once() -> None:
    # a counted once: 1/61; b at its place in the first list, 1/63, plus 1/61 in the second
    assert reciprocal_rank([["a", "a", "b"], ["b"]], key=str) == ["b", "a"]
    assert reciprocal_rank([["a", "a"], ["b"]], key=str) == ["a", "b"]  # not 2/61 for a: a tie, round-robin's order


def test_k_weighs_agreement_against_a_top_rank() -> None:
    lists = [["a"], ["x", "y", "b"], ["z", "w", "b"]]
    # b twice at rank 3 against a once at rank 1: 2/(k+3) against 1/(k+1)
    assert reciprocal_rank(lists, key=str)[0] == "b"            # k = 60: agreement wins
    assert reciprocal_rank(lists, key=str, k=0)[0] == "a"       # 2/3 < 1
    assert reciprocal_rank(lists, key=str, k=1)[:2] == ["a", "x"]  # 2/4 = 1/2: a tie, round-robin's order


def test_the_item_kept_is_the_one_met_at_its_best_rank() -> None:
    lists = [[ChunkHit("v1", 0.9), ChunkHit("shared", 0.5)], [ChunkHit("shared", 0.0, "entity")]]
    fused = fuse_chunks(lists, 10, "rrf")
    assert [(hit.id, hit.origin) for hit in fused] == [("shared", "entity"), ("v1", "vector")]
    assert [hit.id for hit in fuse_chunks(lists, 1, "rrf")] == ["shared"]
    assert [hit.id for hit in fuse_chunks(lists, 10)] == ["v1", "shared"]  # round-robin by default


def test_the_fusions_are_the_knobs_choices() -> None:
    setting = SETTINGS_BY_NAME["fusion"]
    assert knob_of(setting).choices == FUSIONS and setting.default == "roundrobin"
    assert fuse([[]], key=str, method="rrf") == []
    with pytest.raises(ValueError, match="roundrobin, rrf"):
        fuse([["a"]], key=str, method="borda")


def test_a_rerank_url_names_the_server_or_the_endpoint() -> None:
    assert rerank_endpoint("http://127.0.0.1:8080") == ("http://127.0.0.1:8080", "/v1/rerank")
    assert rerank_endpoint("http://gpu:8000/v1") == ("http://gpu:8000", "/v1/rerank")
    assert rerank_endpoint("http://gateway/models/reranker/") == ("http://gateway", "/models/reranker/v1/rerank")
    assert rerank_endpoint("http://infinity:7997/rerank") == ("http://infinity:7997", "/rerank")
    assert rerank_endpoint("https://tei.example/v1/rerank/") == ("https://tei.example", "/v1/rerank")


def test_the_rerank_settings_are_off_by_default() -> None:
    settings = Settings.load(environ={})
    assert (settings.rerank_url, settings.rerank_model, settings.rerank_timeout, settings.rerank_top_n) == (
        None, None, 2.0, 0)
    assert Settings.load(environ={"GRAPHGATE_RERANK_URL": "http://h:1/"}).rerank_url == "http://h:1"


# --- through /rag/query ---

@contextlib.asynccontextmanager
async def knowledge_base(settings: Settings, fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        for name, text in DOCUMENTS.items():
            await settle(client, (await upload(client, name, text))["id"])
        yield client


def passages(result: dict[str, Any]) -> list[str]:
    """The chunk contents in the context, in their order there."""
    return [json.loads(line)["content"] for line in result["context"].splitlines()
            if line.startswith('{"reference_id"')]


def chunk_ids(result: dict[str, Any], origin: str | None = None) -> list[str]:
    return [c["id"] for c in result["chunks"] if origin is None or c["origin"] == origin]


async def test_rrf_through_rag_query_is_the_reciprocal_rank_of_the_channels_lists(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with knowledge_base(settings, fake) as kb:
        # the mix's chunk lists, each seen alone: the chunk channel (naive mode) and the chosen
        # graph items' sources (hybrid mode, every chunk kept; its origin says which list)
        vector = chunk_ids(await query(kb, **{**QUESTION, "mode": "naive"}))
        graph = await query(kb, **{**QUESTION, "mode": "hybrid", "chunk_top_k": 1000, "fusion": "rrf"})
        lists = [vector, chunk_ids(graph, "entity"), chunk_ids(graph, "relation")]
        names = {c["id"]: c["documents"] for c in (await query(kb, **{**QUESTION, "chunk_top_k": 1000}))["chunks"]}

        plain = await query(kb, **QUESTION)
        fused = await query(kb, **QUESTION, fusion="rrf")
        assert chunk_ids(plain) == round_robin(lists, key=str)[:4]
        assert chunk_ids(fused) == reciprocal_rank(lists, key=str)[:4]
        # the prose that only shares words leads round-robin; the club's own chunk, which the
        # vectors and the entities both found, leads the fused order, the prose falls to last
        assert names[chunk_ids(plain)[0]] == ["rooms.txt"]
        assert names[chunk_ids(fused)[0]] == ["club.txt"] and names[chunk_ids(fused)[-1]] == ["rooms.txt"]
        assert "rerank" not in fused and "rerank" not in fused["timings"]
        response = await kb.post("/rag/query", json={**QUESTION, "fusion": "borda"})
        assert response.status_code == 400 and "fusion must be one of roundrobin, rrf" in response.text


async def test_reranking_is_off_by_default(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with knowledge_base(settings, fake) as kb:
        result = await query(kb, **QUESTION)
        assert len(result["chunks"]) == 4
        assert "rerank" not in result and "rerank" not in result["timings"]
        assert all("rerank_score" not in c for c in result["chunks"])
        assert fake.requests_to("/v1/rerank") == []


async def test_the_reranked_order_follows_the_servers_scores(settings: Settings, fake: FakeOllama,
                                                             facts: KnownFacts) -> None:
    async with knowledge_base(settings, fake) as kb:
        fused = await query(kb, **QUESTION)
    async with gateway_client(settings.replace(rerank_url=RERANK_URL, rerank_model="bge-reranker"), fake) as kb:
        result = await query(kb, **QUESTION)
    [call] = fake.requests_to("/v1/rerank")
    documents = [c["content"] for c in fused["chunks"]]
    assert call.json == {"model": "bge-reranker", "query": QUESTION["query"], "documents": documents, "top_n": 4}
    scores = [overlap_score(QUESTION["query"], document) for document in documents]
    order = sorted(range(4), key=lambda i: (-scores[i], i))
    assert chunk_ids(result) == [fused["chunks"][i]["id"] for i in order] != chunk_ids(fused)
    assert [c["rerank_score"] for c in result["chunks"]] == [round(scores[i], 4) for i in order]
    assert result["rerank"] == "4 chunks re-ranked, 4 kept" and "rerank" in result["timings"]
    assert passages(result) == [c["content"] for c in result["chunks"]]  # the context holds them in that order


async def test_top_n_keeps_the_best_chunks(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with knowledge_base(settings.replace(rerank_url=RERANK_URL, rerank_top_n=2), fake) as kb:
        result = await query(kb, **QUESTION)
        nothing = await query(kb, **{**QUESTION, "mode": "naive", "cosine_threshold": 1})
    assert nothing["chunks"] == [] and nothing["rerank"] == "nothing to re-rank"
    [call] = fake.requests_to("/v1/rerank")
    assert call.json["top_n"] == 2 and "model" not in call.json and len(call.json["documents"]) == 4
    scores = [overlap_score(QUESTION["query"], document) for document in call.json["documents"]]
    best = sorted(range(4), key=lambda i: (-scores[i], i))[:2]
    assert [c["content"] for c in result["chunks"]] == [call.json["documents"][i] for i in best]
    assert [c["rerank_score"] for c in result["chunks"]] == [round(scores[i], 4) for i in best]
    assert result["rerank"] == "4 chunks re-ranked, 2 kept"


GARBAGE = [
    ([1, 2, 3], "expected an object, got a list"),
    ({"data": []}, "its results are null, not a list of scores"),
    ({"results": []}, "its results are a list [], not a list of scores"),
    ({"results": ["first"]}, "a result is a string"),
    ({"results": [{"index": 9, "relevance_score": 1.0}]}, "a result's index is a number 9, not one of the 4 documents"),
    ({"results": [{"index": True, "relevance_score": 1.0}]}, "a result's index is a boolean"),
    ({"results": [{"index": 0, "relevance_score": "high"}]}, "a result's relevance_score is a string"),
    ({"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]}, "scored twice"),
    ({"results": [{"index": 0, "relevance_score": float("nan")}]}, "sent invalid JSON for /v1/rerank"),
]


async def test_a_reranker_that_fails_leaves_the_fused_order_and_says_why(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, caplog: pytest.LogCaptureFixture) -> None:
    async with knowledge_base(settings, fake) as kb:
        fused = await query(kb, **QUESTION)
    async with gateway_client(settings.replace(rerank_url=RERANK_URL), fake) as kb:
        fake.fail_paths["/v1/rerank"] = 503
        result = await query(kb, **QUESTION)
        assert chunk_ids(result) == chunk_ids(fused) and result["context"] == fused["context"]
        assert result["rerank"] == ("skipped: re-ranking server at http://rerank.test answered HTTP 503: "
                                    "injected failure")
        assert "rerank" in result["timings"] and all("rerank_score" not in c for c in result["chunks"])
        assert (await query(kb, **QUESTION))["rerank"] == result["rerank"]
        assert len(failures(caplog)) == 1  # logged once, not on every turn
        del fake.fail_paths["/v1/rerank"]
        for reply, reason in GARBAGE:
            fake.wrong_shapes["/v1/rerank"] = reply
            result = await query(kb, **QUESTION)
            assert chunk_ids(result) == chunk_ids(fused), reply
            assert result["rerank"].startswith("skipped: re-ranking server at http://rerank.test "), result["rerank"]
            assert reason in result["rerank"], (reason, result["rerank"])
        assert len(fake.requests_to("/v1/rerank")) == 2 + len(GARBAGE)
        # a chat turn goes on with the fused order too, and its trace says why
        response = await kb.post("/api/chat", json={"model": MODEL, "stream": False, "messages": [
            {"role": "user", "content": QUESTION["query"]}]})
        assert response.status_code == 200
        chat = next(t for t in await traces(kb) if t["api"] != "query")
        assert chat["augmented"] and chat["detail"]["rerank"].startswith("skipped: re-ranking server at ")
        assert next(t for t in await traces(kb) if t["api"] == "query")["detail"]["rerank"].startswith("skipped: ")


def failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("re-ranking failed")]


@contextlib.asynccontextmanager
async def over_the_network(settings: Settings, fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    """GraphGate in-process over the knowledge base already stored, calling the fake upstream (and a
    re-ranking server) over real sockets: where connections are refused and deadlines cut real reads."""
    with fake.serve() as url:
        app = create_app(settings.replace(upstream=url, rerank_url=settings.rerank_url or url))
        async with running(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435") as client:
                yield client


async def test_a_reranker_that_is_down_or_slow_leaves_the_fused_order(settings: Settings, fake: FakeOllama,
                                                                      facts: KnownFacts) -> None:
    async with knowledge_base(settings, fake) as kb:
        fused = await query(kb, **QUESTION)
    down = f"http://127.0.0.1:{silent_port()}"
    async with over_the_network(settings.replace(rerank_url=down), fake) as kb:
        result = await query(kb, **QUESTION)
        assert chunk_ids(result) == chunk_ids(fused)
        assert result["rerank"].startswith(f"skipped: re-ranking server at {down} is unreachable: ")
    fake.hang_paths.add("/v1/rerank")
    async with over_the_network(settings.replace(rerank_timeout=0.3), fake) as kb:
        result = await query(kb, **QUESTION)
        assert chunk_ids(result) == chunk_ids(fused)
        assert result["rerank"].startswith("skipped: re-ranking server at http://127.0.0.1:")
        assert result["rerank"].endswith(" timed out: no answer to /v1/rerank within 0.3 s")
        assert fake.hangs and fake.hangs[-1].path == "/v1/rerank"
