"""Bad uploads and upstream faults during ingestion: clear errors, clean retries, a consistent store."""

from __future__ import annotations

import io
import random

import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.corpus import TEAM
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
async def rag(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings.replace(max_upload_bytes=10_000, llm_retries=2), fake) as client:
        yield client


async def assert_nothing_stored(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    listed = (await client.get("/rag/documents")).json()
    assert listed["total"] == 0
    stats = await graph(client)
    assert (stats["chunks"], stats["entities"], stats["relations"]) == (0, 0, 0)
    assert not fake.requests_to("/api/chat") and not fake.requests_to("/api/embed")


@pytest.mark.parametrize(("name", "data", "status", "fragment"), [
    ("program.exe", b"MZ\x90\x00", 415, "unsupported file type '.exe'"),
    ("notes", b"hello", 415, "has no extension"),
    ("empty.txt", b"", 400, "is empty"),
    ("garbage.txt", random.Random(7).randbytes(4000), 400, "not readable text"),
    ("huge.txt", b"a" * 10_001, 413, "limit"),
    ("broken.pdf", b"%PDF-1.4 this is not really a pdf", 400, "could not read PDF"),
    ("blank.md", b"   \n\n \t \n", 400, "contains no text"),
])
async def test_rejected_uploads_change_nothing(rag: httpx.AsyncClient, fake: FakeOllama, name: str, data: bytes,
                                               status: int, fragment: str) -> None:
    response = await rag.post("/rag/documents", files={"file": (name, io.BytesIO(data))})
    assert response.status_code == status, response.text
    body = response.json()
    assert fragment in body["error"]
    assert body["documents"][0]["outcome"] == "rejected"
    await assert_nothing_stored(rag, fake)


async def test_path_traversal_names_are_reduced_to_a_file_name(rag: httpx.AsyncClient, settings: Settings) -> None:
    evil = ("../../../etc/cron.d/evil.txt", io.BytesIO(TEAM.encode()))
    response = await rag.post("/rag/documents", files={"file": evil})
    assert response.status_code == 202
    document = response.json()["documents"][0]
    assert document["name"] == "evil.txt"
    assert not (settings.data_dir.parent / "etc").exists()
    assert sorted(p.name for p in settings.data_dir.iterdir() if p.is_dir()) == []  # no folders were created


async def test_several_files_get_their_own_results(rag: httpx.AsyncClient) -> None:
    files = [("files", ("a.txt", io.BytesIO(TEAM.encode()))), ("files", ("b.exe", io.BytesIO(b"x"))),
             ("files", ("c.txt", io.BytesIO(TEAM.encode())))]
    response = await rag.post("/rag/documents", files=files)
    assert response.status_code == 202
    outcomes = [(d["name"], d["outcome"]) for d in response.json()["documents"]]
    assert outcomes == [("a.txt", "accepted"), ("b.exe", "rejected"), ("c.txt", "duplicate")]


async def test_bad_json_uploads(rag: httpx.AsyncClient, fake: FakeOllama) -> None:
    assert (await rag.post("/rag/documents", json={"name": "x.txt"})).status_code == 400
    assert (await rag.post("/rag/documents", content=b"{nope")).status_code == 400
    assert (await rag.post("/rag/documents", json={"name": "x.txt", "text": "   "})).status_code == 400
    await assert_nothing_stored(rag, fake)


async def test_bad_query_parameters(rag: httpx.AsyncClient) -> None:
    assert (await rag.get("/rag/documents?status=lost")).status_code == 400
    assert (await rag.get("/rag/documents?limit=0")).status_code == 400
    assert (await rag.get("/rag/documents?offset=x")).status_code == 400
    assert (await rag.get("/rag/documents/doc-nope")).status_code == 404
    assert (await rag.delete("/rag/documents/doc-nope")).status_code == 404
    assert (await rag.post("/rag/documents/doc-nope/retry")).status_code == 404


@on_both_backends
async def test_search_is_literal(rag: httpx.AsyncClient) -> None:
    await upload(rag, "100%_real.txt", TEAM)
    for term, hits in (("100%", 1), ("%", 1), ("_", 1), ("' OR 1=1 --", 0), ("x%", 0)):
        listed = (await rag.get("/rag/documents", params={"search": term})).json()
        assert listed["total"] == hits, term


async def test_upstream_down_during_ingestion_fails_cleanly_and_retries(settings: Settings, fake: FakeOllama,
                                                                       facts: KnownFacts) -> None:
    fake.fail_paths["/api/chat"] = 503
    async with gateway_client(settings.replace(llm_retries=2), fake) as client:
        document = await settle(client, (await upload(client, "team.txt", TEAM))["id"])
        assert document["status"] == "failed"
        assert "injected failure" in document["error"]
        assert len(fake.requests_to("/api/chat")) == 2  # retried, then gave up
        stats = await graph(client)
        assert (stats["chunks"], stats["entities"]) == (0, 0)
        del fake.fail_paths["/api/chat"]
        assert (await client.post(f"/rag/documents/{document['id']}/retry")).status_code == 202
        assert (await settle(client, document["id"]))["status"] == "processed"
        assert (await client.post(f"/rag/documents/{document['id']}/retry")).status_code == 409


@on_both_backends
async def test_wrong_embedding_dimension_fails_with_reindex_advice(settings: Settings, fake: FakeOllama,
                                                                  facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])
        fake.embed_dims["nomic-embed-text:latest"] = 32
        document = await settle(client, (await upload(client, "more.txt", "Carol White visited Berlin."))["id"])
        assert document["status"] == "failed"
        assert "graphgate reindex" in document["error"] and "32-dimensional" in document["error"]
        stats = await graph(client)
        assert stats["chunks"] == 1 and stats["index_sizes"]["chunks"] == 1


async def test_embeddings_that_are_not_numbers_fail_the_document_cleanly(settings: Settings, fake: FakeOllama,
                                                                           facts: KnownFacts) -> None:
    """A null inside a vector (what an Ollama model's NaN becomes in JSON) fails the document with a
    readable error instead of storing a vector nothing can be compared with; a retry then works."""
    async with gateway_client(settings.replace(llm_retries=1), fake) as client:
        fake.embed_null_for = "Berlin"
        document = await settle(client, (await upload(client, "more.txt", "Carol White visited Berlin."))["id"])
        assert document["status"] == "failed"
        assert "returned vectors with NaN or infinite values" in document["error"]
        stats = await graph(client)
        assert (stats["chunks"], stats["entities"], stats["index_sizes"]["entities"]) == (0, 0, 0)
        fake.embed_null_for = None
        assert (await client.post(f"/rag/documents/{document['id']}/retry")).status_code == 202
        assert (await settle(client, document["id"]))["status"] == "processed"
        assert (await graph(client))["chunks"] == 1


async def test_read_only_data_directory_keeps_the_gateway_proxying(settings: Settings, fake: FakeOllama,
                                                                  tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory should be")
    async with gateway_client(settings.replace(data_dir=blocker / "data"), fake) as client:
        chat = await client.post("/api/chat", json={"model": "llama3.2:latest", "stream": False,
                                                    "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 200
        response = await client.post("/rag/documents", json={"name": "a.txt", "text": TEAM})
        assert response.status_code == 503
        assert "knowledge store is unavailable" in response.json()["error"]


@on_both_backends
async def test_delete_while_processing(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    fake.chunk_delay = 0.0
    async with gateway_client(settings, fake) as client:
        first = await upload(client, "team.txt", TEAM)
        await settle(client, first["id"])
        second = await upload(client, "city.md", "Carol White lives in Berlin.")
        assert (await client.delete(f"/rag/documents/{second['id']}")).status_code == 200
        await store_of(client).save()
        stats = await graph(client)
        assert stats["documents"]["processed"] == 1 and stats["documents"]["pending"] == 0
        assert stats["index_sizes"]["entities"] == stats["entities"] == stats["graph"]["vertices"]


@on_both_backends
async def test_reupload_after_delete_while_processing_is_processed(settings: Settings, fake: FakeOllama,
                                                                   facts: KnownFacts) -> None:
    fake.reply_delay = 0.3  # keep the first run busy in extraction
    async with gateway_client(settings.replace(gleaning=0), fake) as client:
        first = await upload(client, "team.txt", TEAM)
        import anyio
        await anyio.sleep(0.1)
        assert (await client.delete(f"/rag/documents/{first['id']}")).status_code == 200
        again = await upload(client, "team.txt", TEAM)
        assert again["outcome"] == "accepted" and again["id"] == first["id"]
        assert (await settle(client, again["id"]))["status"] == "processed"



@on_both_backends
async def test_a_failure_is_not_undone_by_a_late_processing_status(rag: httpx.AsyncClient) -> None:
    """The "processing" record is not awaited before extraction starts, so a failure written
    straight through the writer can commit first: the late record must leave it failed."""
    documents = store_of(rag).tables.documents
    document = await settle(rag, (await upload(rag, "team.txt", TEAM))["id"])
    await documents.set_status(document["id"], "failed", "the model refused")
    await documents.start([(document["id"], 3, 0)])  # arrives late
    row = (await rag.get(f"/rag/documents/{document['id']}")).json()
    assert (row["status"], row["error"]) == ("failed", "the model refused")
    await documents.set_status(document["id"], "pending", None)
    await documents.start([(document["id"], 3, 1)])  # the usual order still works
    row = (await rag.get(f"/rag/documents/{document['id']}")).json()
    assert (row["status"], row["chunks_total"], row["chunks_done"]) == ("processing", 3, 1)


async def test_an_unexpected_merge_error_fails_the_batch_and_merging_goes_on(
        rag: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read the store refuses while a batch is being merged fails that batch's documents with a
    readable error; the merge loop survives, so later documents (and the retry) are merged."""
    from proxy.core.errors import StorageError

    merger = rag._transport.app.state.gateway.knowledge.pipeline.merger  # type: ignore[attr-defined]
    documents = merger.store.tables.documents
    read_documents = documents.get_many
    refuse = {"once": True}

    async def get_many(ids):  # the merge stage's read of its batch
        if refuse.pop("once", False):
            raise StorageError("the knowledge store could not read: injected")
        return await read_documents(ids)

    monkeypatch.setattr(documents, "get_many", get_many)
    first = await settle(rag, (await upload(rag, "team.txt", TEAM))["id"])
    assert first["status"] == "failed" and "injected" in first["error"]
    second = await settle(rag, (await upload(rag, "city.txt", "Carol White visited Berlin."))["id"])
    assert second["status"] == "processed"
    assert (await rag.post(f"/rag/documents/{first['id']}/retry")).status_code == 202
    assert (await settle(rag, first["id"]))["status"] == "processed"
