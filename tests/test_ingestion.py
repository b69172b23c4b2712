"""Documents in, knowledge graph out: the whole pipeline through the /rag API, real engines, fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import graph, settle, store_of, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)


@pytest.fixture
async def rag(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        yield client


def chat_calls(fake: FakeOllama) -> int:
    return sum(1 for r in fake.requests_to("/api/chat") if r.json and r.json.get("format"))


def entity_rows(client_app_store) -> dict[str, tuple]:
    return {r[0]: r[1:] for r in client_app_store.tables.db.read_sync(
        lambda c: c.execute("SELECT name, type, description, source_ids FROM entities").fetchall())}


@on_both_backends
async def test_two_documents_build_the_exact_graph(rag: httpx.AsyncClient, fake: FakeOllama,
                                                   facts: KnownFacts) -> None:
    team = await upload(rag, "team.txt", TEAM)
    assert team["outcome"] == "accepted" and team["status"] == "pending"
    # team merged before city: descriptions are joined in the order their documents merged, and two
    # documents in flight at once may finish in either order on a loaded machine
    assert (await settle(rag, team["id"]))["status"] == "processed"
    city = await upload(rag, "city.md", CITY)
    done = await settle(rag, city["id"])
    assert done["status"] == "processed" and done["chunks_done"] == done["chunks_total"] == 1
    assert done["counts"] == {"chunks": 1, "entities": 3, "relations": 2}

    entities = entity_rows(store_of(rag))
    assert {name: row[0] for name, row in entities.items()} == PEOPLE
    acme = entities["Acme Corp"]
    # one description per chunk (within a reply the longer one wins), joined across chunks in order
    assert acme[1].split("\n") == ["Bob Jones works at Acme Corp.", "Acme Corp has its headquarters in Berlin."]
    assert len(acme[2]) == 2  # one chunk from each document
    stats = await graph(rag)
    assert (stats["entities"], stats["relations"], stats["chunks"]) == (6, 5, 2)
    assert stats["index_sizes"] == {"chunks": 2, "entities": 6, "relations": 5}
    assert stats["graph"] == {"vertices": 6, "edges": 5}
    assert facts.calls.count("extract") == 2 and facts.calls.count("glean") == 2


async def test_the_store_log_is_checkpointed_once_the_pipeline_is_idle(rag: httpx.AsyncClient) -> None:
    """DuckDB's own checkpoints (which make readers wait) are rare; GraphGate writes the log into the
    database file itself when ingestion goes quiet, so a restart has little to replay."""
    store = store_of(rag)
    wal = store.tables.db.path.with_name(store.tables.db.path.name + ".wal")
    await settle(rag, (await upload(rag, "team.txt", TEAM))["id"])
    with anyio.fail_after(10):
        while wal.exists() and wal.stat().st_size > 0:
            await anyio.sleep(0.02)
    assert (await graph(rag))["entities"] == 4  # what the checkpoint wrote is all there


@on_both_backends
async def test_duplicate_upload_does_no_work(rag: httpx.AsyncClient, fake: FakeOllama) -> None:
    first = await upload(rag, "team.txt", TEAM)
    await settle(rag, first["id"])
    calls = len(fake.requests)
    again = await upload(rag, "copy-of-team.txt", TEAM)
    assert again["outcome"] == "duplicate" and again["id"] == first["id"] and again["status"] == "processed"
    assert len(fake.requests) == calls


@on_both_backends
async def test_delete_rebuilds_from_stored_extractions_without_the_llm(rag: httpx.AsyncClient, fake: FakeOllama,
                                                                     facts: KnownFacts) -> None:
    team, city = await upload(rag, "team.txt", TEAM), await upload(rag, "city.md", CITY)
    await settle(rag, team["id"])
    await settle(rag, city["id"])
    extraction_calls = chat_calls(fake)
    response = await rag.delete(f"/rag/documents/{city['id']}")
    assert response.status_code == 200
    summary = response.json()
    assert summary["chunks_removed"] == 1 and summary["entities_removed"] == 2
    assert chat_calls(fake) == extraction_calls  # nothing re-extracted
    entities = entity_rows(store_of(rag))
    assert set(entities) == {"Alice Smith", "Bob Jones", "Acme Corp", "Orion"}
    assert "Berlin" not in entities["Acme Corp"][1]
    stats = await graph(rag)
    assert (stats["entities"], stats["relations"], stats["chunks"]) == (4, 3, 1)
    assert stats["index_sizes"] == {"chunks": 1, "entities": 4, "relations": 3}
    assert stats["graph"] == {"vertices": 4, "edges": 3}
    assert (await rag.get(f"/rag/documents/{city['id']}")).status_code == 404


@on_both_backends
async def test_deleting_everything_leaves_an_empty_store(rag: httpx.AsyncClient) -> None:
    ids = [(await upload(rag, n, t))["id"] for n, t in (("team.txt", TEAM), ("city.md", CITY))]
    for document_id in ids:
        await settle(rag, document_id)
    for document_id in ids:
        assert (await rag.delete(f"/rag/documents/{document_id}")).status_code == 200
    stats = await graph(rag)
    assert (stats["entities"], stats["relations"], stats["chunks"]) == (0, 0, 0)
    assert stats["index_sizes"] == {"chunks": 0, "entities": 0, "relations": 0}
    assert stats["graph"] == {"vertices": 0, "edges": 0}


async def test_gleaning_adds_what_the_first_pass_missed(rag: httpx.AsyncClient, facts: KnownFacts) -> None:
    facts.held_back = {"Bob Jones"}
    document = await upload(rag, "team.txt", TEAM)
    await settle(rag, document["id"])
    assert "Bob Jones" in entity_rows(store_of(rag))


async def test_no_gleaning_when_set_to_zero(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(gleaning=0), fake) as client:
        document = await upload(client, "team.txt", TEAM)
        await settle(client, document["id"])
    assert facts.calls == ["extract"]


@on_both_backends
async def test_new_version_extracts_only_new_chunks(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    sections = [f"# Part {i}\n\n" + f"Alice Smith wrote chapter {i} about Orion. " * 8 for i in range(4)]
    async with gateway_client(settings.replace(chunk_tokens=80, chunk_overlap=0, gleaning=0), fake) as client:
        first = await upload(client, "book.md", "\n\n".join(sections))
        first_done = await settle(client, first["id"])
        assert first_done["chunks_total"] >= 4
        calls = facts.calls.count("extract")
        sections[2] = "# Part 2\n\nBob Jones rewrote this part about Acme Corp entirely."
        second = await upload(client, "book.md", "\n\n".join(sections))
        assert second["outcome"] == "replaced"
        second_done = await settle(client, second["id"])
        assert second_done["status"] == "processed"
        assert facts.calls.count("extract") - calls == 1  # only the changed chunk
        assert (await client.get(f"/rag/documents/{first['id']}")).status_code == 404
        listed = (await client.get("/rag/documents")).json()
        assert [d["id"] for d in listed["documents"]] == [second["id"]]
        stats = await graph(client)
        assert stats["chunks"] == second_done["chunks_total"]
        entities = entity_rows(store_of(client))
        assert "Bob Jones" in entities and "chapter 2 " not in entities["Alice Smith"][1]


async def test_summary_past_the_fragment_threshold(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(summary_fragments=5, gleaning=0), fake) as client:
        for i in range(5):  # five documents: five description fragments of Acme Corp
            document = await upload(client, f"office-{i}.txt", f"Acme Corp opened office number {i}.")
            await settle(client, document["id"])
        acme = entity_rows(store_of(client))["Acme Corp"]
    assert facts.calls.count("summary") == 1
    assert acme[1].startswith("Acme Corp: Acme Corp opened office number 0.") and acme[1].endswith("(+3 more)")


async def test_below_the_threshold_descriptions_are_joined(rag: httpx.AsyncClient, facts: KnownFacts) -> None:
    for i in range(4):
        document = await upload(rag, f"office-{i}.txt", f"Acme Corp opened office number {i}.")
        await settle(rag, document["id"])
    assert "summary" not in facts.calls
    assert entity_rows(store_of(rag))["Acme Corp"][1].count("\n") == 3


async def test_malformed_extraction_json_is_retried(rag: httpx.AsyncClient, facts: KnownFacts) -> None:
    facts.malformed = 2
    document = await settle(rag, (await upload(rag, "team.txt", TEAM))["id"])
    assert document["status"] == "processed"
    assert facts.calls[:3] == ["extract", "extract", "extract"]


@on_both_backends
async def test_persistently_malformed_extraction_fails_the_document_cleanly(rag: httpx.AsyncClient,
                                                                           facts: KnownFacts) -> None:
    facts.malformed = 3
    document = await settle(rag, (await upload(rag, "team.txt", TEAM))["id"])
    assert document["status"] == "failed"
    assert "not valid JSON after 3 tries" in document["error"]
    stats = await graph(rag)
    assert (stats["entities"], stats["chunks"]) == (0, 0)
    retried = await rag.post(f"/rag/documents/{document['id']}/retry")
    assert retried.status_code == 202
    assert (await settle(rag, document["id"]))["status"] == "processed"


async def test_uploads_in_flight_together_share_a_transaction_and_see_each_other(rag: httpx.AsyncClient) -> None:
    """Uploads that wait for the writer together are stored in one transaction; the same content
    sent twice at once is stored once (the second sees the first while it is still on its way in)."""
    pipeline = rag._transport.app.state.gateway.knowledge.pipeline  # type: ignore[attr-defined]
    batches: list[int] = []
    insert = pipeline.upload_writer.apply

    def counted(con, items):
        batches.append(len(items))
        return insert(con, items)

    pipeline.upload_writer.apply = counted
    texts = [(f"part-{i}.txt", f"{CITY} Part {i} of the city notes.") for i in range(5)]
    texts += [("team.txt", TEAM), ("team-copy.txt", TEAM)]
    results: dict[str, dict[str, Any]] = {}

    async def send(name: str, text: str) -> None:
        results[name] = await upload(rag, name, text)

    lock = store_of(rag).tables.db.write_lock
    await lock.acquire()  # the writer is busy (a merge, say) while they arrive
    held = True
    try:
        async with anyio.create_task_group() as group:
            for name, text in texts:
                group.start_soon(send, name, text)
            await anyio.sleep(0.3)
            assert not results  # nothing is acknowledged before it is stored
            lock.release()
            held = False
    finally:
        if held:
            lock.release()
    assert max(batches) >= 2 and sum(batches) == 6  # six distinct texts, shared transactions
    team, copy = results["team.txt"], results["team-copy.txt"]
    assert sorted((team["outcome"], copy["outcome"])) == ["accepted", "duplicate"] and team["id"] == copy["id"]
    assert all(results[name]["outcome"] == "accepted" for name, _ in texts[:5])
    for result in results.values():
        assert (await settle(rag, result["id"]))["status"] == "processed"
    listed = (await rag.get("/rag/documents", params={"limit": 100})).json()
    assert len(listed["documents"]) == 6


async def test_a_text_extracted_while_its_record_waits_for_the_writer_is_not_extracted_again(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    """A merge can hold the store's one writer for seconds, and the finished extractions' records
    queue behind it. A second document sharing a chunk with the first, taken up meanwhile, waits
    for that chunk's record (its merge does) instead of paying for the extraction again."""
    text = TEAM + "\n\n" + CITY   # one chunk of 64 tokens; the second document's first chunk is the same
    more = text + "\n\n" + "The harbour council's archive lists every vessel that came in last winter. " * 3
    async with gateway_client(settings.replace(parallel_documents=1, chunk_tokens=64, chunk_overlap=0),
                              fake) as client:
        fake.hold_structured = anyio.Event()
        first = await upload(client, "team.txt", text)
        second = await upload(client, "team-and-harbour.txt", more)
        with anyio.fail_after(10):
            while facts.calls.count("extract") < 1:   # the first document's extraction is under way
                await anyio.sleep(0.01)
        async with store_of(client).tables.db.write_lock:   # the writer busy: no record is committed
            fake.hold_structured.set()
            with anyio.fail_after(10):   # the first waits to merge; the worker takes up the second
                while not any(w["id"] == second["id"] and w["phase"] == "waiting to merge"
                              for w in (await client.get("/rag/pipeline")).json()["running"]):
                    await anyio.sleep(0.01)
        assert (await settle(client, first["id"]))["status"] == "processed"
        done = await settle(client, second["id"])
        assert done["status"] == "processed" and done["chunks_done"] == done["chunks_total"] == 2
        assert facts.calls.count("extract") == 2   # the shared chunk once, the second's own chunk once
