"""The keyword channel (BM25): the store's keyword indexes over chunk texts and entity / relation
names and descriptions (bm25s, proxy/store/keywords_bm25.py), kept in step with every commit,
removed with their documents, saved and healed at start-up, and the channel behind the
``keyword_search`` knob (default off: retrieval unchanged, the indexes not even built). Real
engines, the scripted model of tests/extractor.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import anyio.to_thread
import bm25s
import httpx
import pytest

from proxy.core.modes import Mode
from proxy.core.settings import Settings
from proxy.retrieval.channels import channels_for
from proxy.retrieval.params import QueryParams
from proxy.store import keywords_bm25
from proxy.store.keywords_bm25 import Bm25Index
from proxy.store.store import KnowledgeStore
from tests.conftest import gateway_client
from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)

CODE = "ERR-4711"
INCIDENT = ("The Billing Service stopped after the upgrade with error code ERR-4711. "
            "Dana Reed fixed ERR-4711 in the Billing Service by rolling the upgrade back.")
# a question whose vector matches nothing (threshold 1): only a word-for-word match can ground it
ONLY_WORDS = {"keywords": "off", "cosine_threshold": 1.0}


@pytest.fixture
def incident_facts(fake: FakeOllama) -> KnownFacts:
    fake.structured = KnownFacts({**PEOPLE, "Billing Service": "Equipment", "Dana Reed": "Person"})
    return fake.structured


def store_of(client: httpx.AsyncClient) -> KnowledgeStore:
    return client._transport.app.state.gateway.knowledge.store  # type: ignore[attr-defined]


async def ingest(client: httpx.AsyncClient, *documents: tuple[str, str]) -> list[str]:
    ids = []
    for name, text in documents:
        document = await settle(client, (await upload(client, name, text))["id"])
        assert document["status"] == "processed"
        ids.append(document["id"])
    return ids


def found(store: KnowledgeStore, table: str, text: str) -> list[int]:
    return [key for key, _ in store.keyword_search_sync(table, text, 10)]


# --- the index ---

def test_words_keep_codes_and_leave_stopwords_out() -> None:
    assert keywords_bm25.words(["The code ERR-4711 is back", ""]) == [["code", "err", "4711", "back"], []]


@pytest.mark.parametrize("b", [keywords_bm25.B, keywords_bm25.ENTITY_B])
def test_recent_texts_score_as_a_rebuilt_index_does(tmp_path: Path, b: float) -> None:
    texts = ["the code ERR-4711 failed twice", "hello world again", "world peace treaty", "ERR-17 in the world"]
    recent, rebuilt = Bm25Index(tmp_path / "a.bm25", b), Bm25Index(tmp_path / "b.bm25", b)
    recent.add([1, 2, 3, 4], texts)
    rebuilt.rebuild([1, 2, 3, 4], texts)
    for text in ("err 4711", "world", "peace world", "nothing shared"):
        mine, theirs = recent.search(text, 10), rebuilt.search(text, 10)
        assert [key for key, _ in mine] == [key for key, _ in theirs], text
        assert [score for _, score in mine] == pytest.approx([score for _, score in theirs], rel=1e-5), text
    model = bm25s.BM25(b=b)
    model.index(keywords_bm25.words(texts), show_progress=False)
    assert [score for _, score in rebuilt.search("world", 10)] == pytest.approx(
        sorted((s for s in model.get_scores(["world"]) if s > 0), reverse=True), rel=1e-5)


def test_an_entitys_description_is_not_discounted_for_its_length(tmp_path: Path) -> None:
    """An entity's description is its notes merged from every mention: a hub's long one holding
    "printing" once scores as a short one holding it once (the chunks' index keeps BM25's usual b)."""
    hub = "Melvar Trading is one of the printing companies. " + " ".join(
        f"Melvar Trading signed deal number {i} with a partner." for i in range(40))
    texts = [hub, "Belsuv Enterprises is one of the printing companies."]
    entities = Bm25Index(tmp_path / "entities.bm25", keywords_bm25.ENTITY_B)
    entities.rebuild([1, 2], texts)
    scores = dict(entities.search("printing", 10))
    assert scores[1] == pytest.approx(scores[2])
    chunks = Bm25Index(tmp_path / "chunks.bm25")
    chunks.rebuild([1, 2], texts)
    assert dict(chunks.search("printing", 10))[1] < dict(chunks.search("printing", 10))[2]
    # saved with another b, an index is not loaded (the store builds it again)
    entities.save(1)
    assert not Bm25Index(tmp_path / "entities.bm25").load()
    assert Bm25Index(tmp_path / "entities.bm25", keywords_bm25.ENTITY_B).load()


def test_removed_keys_are_never_found_and_a_rebuild_is_asked_for_past_the_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keywords_bm25, "REBUILD_MIN", 2)
    index = Bm25Index(tmp_path / "chunks.bm25")
    index.rebuild([1, 2, 3], ["alpha code", "beta code", "gamma code"])
    index.add([4], ["delta code"])
    index.add([4], ["a text ignored: key 4 is held"])
    assert not index.needs_rebuild() and sorted(index.keys().tolist()) == [1, 2, 3, 4]
    index.remove([2, 4])
    assert [key for key, _ in index.search("code", 10)] == [1, 3] and len(index) == 2
    assert index.search("beta delta", 10) == [] and not index.needs_rebuild()
    index.add([5], ["epsilon code"])
    assert not index.needs_rebuild()   # one removed from the main part, one added since: two
    index.add([6], ["zeta code"])
    assert index.needs_rebuild()       # three: more than REBUILD_MIN


def test_saved_main_part_and_removed_keys_survive_a_reload(tmp_path: Path) -> None:
    index = Bm25Index(tmp_path / "chunks.bm25")
    index.rebuild([1, 2, 3], ["alpha ERR-4711", "beta ERR-4711", "gamma"])
    index.remove([2])
    index.add([9], ["recent ERR-4711"])
    index.save(7)
    again = Bm25Index(tmp_path / "chunks.bm25")
    assert again.load() and again.generation == 7
    # the recent text is not saved: the store reads it back from the tables (key sets compared)
    assert sorted(again.keys().tolist()) == [1, 3]
    assert [key for key, _ in again.search("ERR-4711", 10)] == [1]
    assert not Bm25Index(tmp_path / "missing.bm25").load()


def test_texts_without_a_single_word_are_held_and_found_by_nothing(tmp_path: Path) -> None:
    index = Bm25Index(tmp_path / "chunks.bm25")
    index.rebuild([1, 2], ["", "the of and"])
    assert len(index) == 2 and index.search("the code", 10) == []
    index.add([3], ["code"])
    assert index.search("the code", 10)[0][0] == 3
    index.save(1)
    again = Bm25Index(tmp_path / "chunks.bm25")
    assert again.load() and sorted(again.keys().tolist()) == [1, 2] and again.search("code", 10) == []


# --- the knob and the channel ---

def test_the_keyword_channel_runs_only_when_keyword_search_is_on() -> None:
    on = QueryParams.from_settings(Settings(), keyword_search="on")
    assert all("keyword_search" in [c.name for c in channels_for(mode, on)] for mode in Mode if mode != Mode.BYPASS)
    assert "keyword_search" not in [c.name for c in channels_for(Mode.BYPASS, on)]
    assert all("keyword_search" not in [c.name for c in channels_for(mode)] for mode in Mode)


async def test_a_code_the_embeddings_miss_is_found_by_its_words(
        settings: Settings, fake: FakeOllama, incident_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client, ("team.txt", TEAM), ("incident.txt", INCIDENT), ("city.md", CITY))
        question = f"What does {CODE} mean?"
        assert (await query(client, query=question, mode="naive", **ONLY_WORDS))["chunks"] == []
        naive = await query(client, query=question, mode="naive", keyword_search="on", **ONLY_WORDS)
        assert [c["origin"] for c in naive["chunks"]] == ["keyword"] and CODE in naive["chunks"][0]["content"]
        assert CODE in naive["context"]
        local = await query(client, query=question, mode="local", keyword_search="on", **ONLY_WORDS)
        assert {e["name"] for e in local["entities"]} == {"Billing Service", "Dana Reed"}
        glob = await query(client, query=question, mode="global", keyword_search="on", **ONLY_WORDS)
        assert [(r["source"], r["target"]) for r in glob["relations"]] in (
            [("Billing Service", "Dana Reed")], [("Dana Reed", "Billing Service")])
        mix = await query(client, query=question, mode="mix", keyword_search="on", **ONLY_WORDS)
        assert mix["chunks"] and mix["entities"] and mix["relations"] and CODE in mix["context"]


async def test_deleting_a_document_removes_its_words(settings: Settings, fake: FakeOllama,
                                                     incident_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        team, incident = await ingest(client, ("team.txt", TEAM), ("incident.txt", INCIDENT))
        store = store_of(client)
        assert len(found(store, "chunks", CODE)) == 1 and found(store, "entities", CODE)
        assert (await client.delete(f"/rag/documents/{incident}")).status_code == 200
        assert [found(store, table, CODE) for table in ("chunks", "entities", "relations")] == [[], [], []]
        assert found(store, "chunks", "Orion") and found(store, "entities", "Acme")
        naive = await query(client, query=CODE, mode="naive", keyword_search="on", **ONLY_WORDS)
        assert naive["chunks"] == [] and CODE not in naive["context"]


async def test_a_restart_heals_a_missing_or_stale_index(settings: Settings, fake: FakeOllama,
                                                        incident_facts: KnownFacts) -> None:
    data = settings.data_dir
    async with gateway_client(settings, fake) as client:
        (team,) = await ingest(client, ("team.txt", TEAM))
        store = store_of(client)
        assert found(store, "chunks", "Orion")                      # built on first use, and saved
        assert store.keyword_count("entities") == 0                 # each table's on its own first use
        assert found(store, "entities", "Acme") and found(store, "relations", "Acme")
        stale = {table: data / f"{table}.bm25.stale" for table in ("chunks", "entities", "relations")}
        for table, copy in stale.items():
            shutil.copytree(data / f"{table}.bm25", copy)
        await ingest(client, ("incident.txt", INCIDENT))
        assert (await client.delete(f"/rag/documents/{team}")).status_code == 200
        live = {table: sorted(store.keyword_search_sync(table, f"{CODE} Orion Acme", 10))
                for table in ("chunks", "entities", "relations")}
        assert all(live.values()) and not found(store, "chunks", "Orion")
    for table, copy in stale.items():   # the copies from before the incident and the deletion
        shutil.rmtree(data / f"{table}.bm25")
        copy.rename(data / f"{table}.bm25")
    async with gateway_client(settings, fake) as client:
        store = store_of(client)
        assert store.keyword_count("chunks") == 1                   # loaded and healed at start-up
        for table, hits in live.items():
            healed = sorted(store.keyword_search_sync(table, f"{CODE} Orion Acme", 10))
            assert [key for key, _ in healed] == [key for key, _ in hits]
            assert [score for _, score in healed] == pytest.approx([score for _, score in hits])
    shutil.rmtree(data / "chunks.bm25")                             # a missing one is rebuilt on its first use
    async with gateway_client(settings, fake) as client:
        store = store_of(client)
        assert store.keyword_count("chunks") == 0 and store.keyword_count("entities") > 0
        assert [key for key, _ in store.keyword_search_sync("chunks", CODE, 10)] == [live["chunks"][0][0]]
        assert store.keyword_count("chunks") == 1


async def test_with_keyword_search_off_retrieval_is_unchanged(settings: Settings, fake: FakeOllama,
                                                              incident_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client, ("team.txt", TEAM), ("incident.txt", INCIDENT), ("city.md", CITY))
        for mode in ("local", "global", "hybrid", "mix", "naive"):
            body = {"query": f"Who fixed {CODE} at Acme Corp?", "mode": mode, "keywords": "off"}
            default, off = await query(client, **body), await query(client, **body, keyword_search="off")
            for result in (default, off):
                result.pop("timings")
            assert default == off
        store = store_of(client)
        assert store.keyword_count("chunks") == 0                   # not even built
        assert not list(settings.data_dir.glob("*.bm25"))


async def test_commits_past_the_rebuild_share_rebuild_from_the_tables(
        settings: Settings, fake: FakeOllama, incident_facts: KnownFacts, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keywords_bm25, "REBUILD_MIN", 0)   # every commit's changes outgrow it
    async with gateway_client(settings, fake) as client:
        (team,) = await ingest(client, ("team.txt", TEAM))
        store = store_of(client)
        assert found(store, "chunks", "Orion")
        await ingest(client, ("incident.txt", INCIDENT), ("city.md", CITY))
        assert (await client.delete(f"/rag/documents/{team}")).status_code == 200
        await anyio.to_thread.run_sync(store.keywords.settle_sync)   # rebuilt in the background
        searches = [(table, text) for table in ("chunks", "entities", "relations")
                    for text in (CODE, "Berlin", "Orion")]
        kept = [store.keyword_search_sync(table, text, 10) for table, text in searches]
        assert all(store.keyword_count(table) == len(store.tables.keys_sync(table)) for table, _ in searches)
        monkeypatch.setattr(keywords_bm25, "REBUILD_MIN", 10**6)
        await store.rebuild()                                # graphgate reindex: every index from the tables
        for (table, text), hits in zip(searches, kept, strict=True):
            rebuilt = store.keyword_search_sync(table, text, 10)
            assert [key for key, _ in rebuilt] == [key for key, _ in hits], (table, text)
            assert [s for _, s in rebuilt] == pytest.approx([s for _, s in hits]), (table, text)
        assert found(store, "chunks", CODE) and not found(store, "chunks", "Orion")
