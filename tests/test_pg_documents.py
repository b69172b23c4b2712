"""The documents' tables held to the same answers on both backends (DuckDB and PostgreSQL): rows as
read back, paging, sorting, filtering and searching, status transitions, the pipeline's grouped
writes (uploads, starts, replies, extractions), chunks and what a document's deletion would do, and
the health probe (where a server store honestly differs from a data directory)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from proxy.core.llm_cache import CacheEntry
from proxy.store.duckdb.documents import DuckDBDocuments
from proxy.store.postgres.connection import PgDatabase
from proxy.store.postgres.documents import PgDocuments, takes_writes
from proxy.store.protocols.documents import DocumentTables, ExtractionRecord

pytestmark = pytest.mark.anyio

BASE = datetime(2024, 5, 1, 12, 0, 0)


def documents_of(backend: tuple[str, Any]) -> DocumentTables:
    name, db = backend
    return DuckDBDocuments(db) if name == "embedded" else PgDocuments(db)


def placeholders(name: str, sql: str) -> str:
    """DuckDB's ``?`` placeholders as psycopg's ``%s`` for PostgreSQL (test set-up only)."""
    return sql if name == "embedded" else sql.replace("?", "%s")


async def execute(backend: tuple[str, Any], sql: str, params: list[Any]) -> None:
    name, db = backend
    await db.write(lambda con: con.execute(placeholders(name, sql), params))


async def rows(backend: tuple[str, Any], sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    name, db = backend
    return [tuple(r) for r in await db.read(lambda con: con.execute(placeholders(name, sql), params or []).fetchall())]


def record(document_id: str, name: str, minutes: int, *, size: int = 10, replaces: str | None = None,
           metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": document_id, "name": name, "mime": "text/plain", "size": size,
                           "replaces": replaces, "created_at": BASE + timedelta(minutes=minutes)}
    if metadata is not None:
        doc["metadata"] = metadata
    return doc


async def add(documents: DocumentTables, *records: dict[str, Any]) -> None:
    for doc in records:
        await documents.insert(doc, f"text of {doc['id']}")


async def seed_graph(backend: tuple[str, Any]) -> None:
    """Documents a (chunks c1 c2 c3), b (c3 c4); entities and relations sourced by those chunks."""
    name, _ = backend
    vector = "FLOAT[]" if name == "embedded" else "vector"
    for key, (chunk, content) in enumerate([("c1", "one"), ("c2", "two"), ("c3", "three"), ("c4", "four")], 1):
        await execute(backend, f"INSERT INTO chunks VALUES (?, ?, ?, ?, CAST(? AS {vector}))",
                      [chunk, key, content, len(content), "[1.0, 0.0]"])
    for document, chunks in (("a", ["c1", "c2", "c3"]), ("b", ["c3", "c4"])):
        for order, chunk in enumerate(chunks):
            await execute(backend, "INSERT INTO document_chunks VALUES (?, ?, ?)", [document, chunk, order])
    for key, (entity, sources) in enumerate([("alice", ["c1"]), ("bob", ["c1", "c4"]), ("carol", ["c3"]),
                                             ("dave", ["c4"])], 10):
        await execute(backend, f"INSERT INTO entities VALUES (?, ?, ?, 'person', 'd', ?, 'h', CAST(? AS {vector}), "
                               "?, ?)", [entity, entity.title(), key, sources, "[1.0, 0.0]", BASE, BASE])
    for key, (pair, sources) in enumerate([("alice\x1fbob", ["c1", "c2"]), ("bob\x1fdave", ["c4"]),
                                           ("alice\x1fcarol", ["c2", "c4"])], 20):
        source, target = pair.split("\x1f")
        await execute(backend, f"INSERT INTO relations VALUES (?, ?, ?, ?, ?, 'd', 1.0, ?, 'h', "
                               f"CAST(? AS {vector}), ?, ?)",
                      [pair, source, target, key, ["knows"], sources, "[1.0, 0.0]", BASE, BASE])


async def test_inserted_documents_read_back_as_their_new_row(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    first = record("d1", "team.txt", 0, size=123, metadata={"année": 2025, "tags": ["a", "b"]})
    second = record("d2", "team.txt", 5, replaces="d1")
    await add(documents, first, second)
    row = await documents.get("d1")
    assert row == documents.new_row(first) == {
        "id": "d1", "name": "team.txt", "mime": "text/plain", "size": 123, "status": "pending", "error": None,
        "chunks_total": 0, "chunks_done": 0, "replaces": None, "created_at": "2024-05-01T12:00:00.000Z",
        "updated_at": "2024-05-01T12:00:00.000Z", "processed_at": None,
        "metadata": {"année": 2025, "tags": ["a", "b"]}}
    assert await documents.get("missing") is None
    assert set(await documents.get_many(["d1", "d2", "missing"])) == {"d1", "d2"}
    assert await documents.get_many([]) == {}
    assert (await documents.get_many(["d2"]))["d2"] == documents.new_row(second)
    assert await documents.with_text("d2") == (documents.new_row(second), "text of d2")
    assert await documents.with_text("missing") == (None, "")
    assert [d["id"] for d in await documents.named("team.txt")] == ["d1", "d2"]
    assert await documents.named("other.txt") == []
    existing, versions = await documents.and_versions("d2", "team.txt")
    assert existing is not None and existing["id"] == "d2" and [v["id"] for v in versions] == ["d1"]
    existing, versions = await documents.and_versions("d3", "team.txt")
    assert existing is None and [v["id"] for v in versions] == ["d1", "d2"]


async def test_the_same_content_uploaded_twice_is_one_document(backend_db: tuple[str, Any]) -> None:
    """A document's id is its content's hash: the second upload of it (through another replica, or
    in the same batch) keeps the first row and text, on both backends."""
    documents = documents_of(backend_db)
    await documents.insert(record("d1", "first.txt", 0), "the first text")
    await documents.insert(record("d1", "second.txt", 5), "the second text")
    assert await documents.with_text("d1") == (documents.new_row(record("d1", "first.txt", 0)), "the first text")
    assert [d["id"] for d in await documents.named("second.txt")] == []


async def test_uploads_of_one_batch_share_a_statement(backend_db: tuple[str, Any]) -> None:
    """Uploads through the pipeline's writes: a created_at missing from the record is the clock's."""
    documents = documents_of(backend_db)
    writes = documents.ingest_writes()
    with_stamp = record("u1", "one.txt", 1)
    without = {"id": "u2", "name": "two.txt", "mime": "text/markdown", "size": 2}
    async with anyio.create_task_group() as group:
        group.start_soon(writes.run)
        handles = [writes.uploads.submit((with_stamp, "one")), writes.uploads.submit((without, "two"))]
        for handle in handles:
            await handle.wait()
        group.cancel_scope.cancel()
    assert await documents.with_text("u1") == (documents.new_row(with_stamp), "one")
    row, text = await documents.with_text("u2")
    assert row is not None and text == "two" and row["metadata"] == {} and row["replaces"] is None
    assert row["created_at"] == row["updated_at"] and row["created_at"].endswith("Z")
    assert await documents.unfinished_ids() == ["u1", "u2"]


async def test_pages_sort_filter_and_search(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("d1", "b.txt", 3, size=30), record("d2", "B.txt", 1, size=10),
              record("d3", "a_1.txt", 2, size=20), record("d4", "a%1.txt", 4, size=20),
              record("d5", "x\\y.txt", 0, size=5))
    await documents.set_status("d1", "processed")
    await documents.set_status("d3", "failed", "broken")

    async def ids(**kwargs: Any) -> tuple[list[str], int]:
        options = {"status": None, "search": None, "sort": "created_at", "descending": False, "limit": 50,
                   "offset": 0, **kwargs}
        page, total = await documents.page(**options)
        return [d["id"] for d in page], total

    assert await ids() == (["d5", "d2", "d3", "d1", "d4"], 5)
    assert await ids(descending=True) == (["d4", "d1", "d3", "d2", "d5"], 5)
    # names compare byte by byte on both backends (capitals first, then "_", then lower case)
    assert await ids(sort="name") == (["d2", "d4", "d3", "d1", "d5"], 5)
    assert await ids(sort="name", descending=True) == (["d5", "d1", "d3", "d4", "d2"], 5)
    assert await ids(sort="size") == (["d5", "d2", "d3", "d4", "d1"], 5)   # ties by id
    assert await ids(sort="size", descending=True) == (["d1", "d3", "d4", "d2", "d5"], 5)
    assert await ids(sort="status") == (["d3", "d2", "d4", "d5", "d1"], 5)
    assert await ids(sort="not a column") == (["d5", "d2", "d3", "d1", "d4"], 5)
    assert await ids(limit=2, offset=1) == (["d2", "d3"], 5)
    assert await ids(offset=10) == ([], 5)
    assert await ids(status="pending") == (["d5", "d2", "d4"], 3)
    assert await ids(status="processed") == (["d1"], 1)
    # the search is a case-insensitive substring, its % _ \ taken literally
    assert await ids(search="b.TXT") == (["d2", "d1"], 2)
    assert await ids(search="_") == (["d3"], 1)
    assert await ids(search="%") == (["d4"], 1)
    assert await ids(search="\\") == (["d5"], 1)
    assert await ids(search="a", status="pending") == (["d4"], 1)
    assert await ids(ids=["d1", "d4", "missing"]) == (["d1", "d4"], 2)
    assert await ids(ids=[]) == ([], 0)
    assert await ids(ids=["d1", "d2"], search="b", sort="name", limit=1) == (["d2"], 2)


async def test_status_transitions_and_starts(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("d1", "one.txt", 0), record("d2", "two.txt", 1), record("d3", "three.txt", 2))
    await documents.start([("d1", 3, 1), ("d2", 4, 0)])
    one, two = await documents.get("d1"), await documents.get("d2")
    assert one is not None and two is not None
    assert (one["status"], one["chunks_total"], one["chunks_done"]) == ("processing", 3, 1)
    assert (two["status"], two["chunks_total"], two["chunks_done"]) == ("processing", 4, 0)
    assert one["updated_at"] > one["created_at"]
    assert await documents.unfinished_ids() == ["d1", "d2", "d3"]

    await documents.set_status("d1", "failed", "the model refused")
    await documents.start([("d1", 5, 0)])  # a late "processing" record leaves a failure as it is
    one = await documents.get("d1")
    assert one is not None and (one["status"], one["error"], one["chunks_total"]) == ("failed", "the model refused", 3)
    await documents.set_status("d1", "pending", None)
    await documents.start([("d1", 5, 2)])
    one = await documents.get("d1")
    assert one is not None and (one["status"], one["error"], one["chunks_total"], one["chunks_done"]) == (
        "processing", None, 5, 2)
    await documents.set_status("d2", "processed")
    await documents.start([])
    assert await documents.unfinished_ids() == ["d1", "d3"]

    await documents.delete_unprocessed("d3")
    assert await documents.get("d3") is None and await documents.unfinished_ids() == ["d1"]


async def test_metadata_edits_and_what_filters_match(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("d1", "one.txt", 0, metadata={"team": "hr"}), record("d2", "two.txt", 1))
    version = documents.metadata_version
    row = await documents.set_metadata("d2", {"team": "ops", "note": "ünïcode"})
    assert row is not None and row["metadata"] == {"team": "ops", "note": "ünïcode"}
    assert documents.metadata_version == version + 1
    assert await documents.set_metadata("missing", {"x": 1}) is None
    assert documents.metadata_version == version + 2
    assert await documents.searchable_metadata() == []   # only processed documents
    await documents.set_status("d2", "processed")
    assert await documents.searchable_metadata() == [("two.txt", {"team": "ops", "note": "ünïcode"})]
    assert await documents.metadata_of() == {"d1": ("one.txt", {"team": "hr"}),
                                             "d2": ("two.txt", {"team": "ops", "note": "ünïcode"})}
    assert await documents.metadata_of(["d1", "missing"]) == {"d1": ("one.txt", {"team": "hr"})}
    assert await documents.metadata_of([]) == {}


async def test_extractions_replies_and_progress_commit_together(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("d1", "one.txt", 0), record("d2", "two.txt", 1))
    await documents.start([("d1", 3, 0), ("d2", 2, 0)])
    reply = CacheEntry("extract", "k1", "m", "request 1", "response 1")
    early = CacheEntry("extract", "k0", "m", "request 0", "response 0")
    records = [ExtractionRecord("d1", "c1", "m", '{"entities": []}', ["raw 1"], [reply], []),
               ExtractionRecord("d1", "c2", "m", '{"entities": [2]}', ["raw 2", "ré"], [], [reply]),
               ExtractionRecord("d2", "c1", "m", '{"other": true}', ["raw 3"], [], [reply])]
    writes = documents.ingest_writes()
    async with anyio.create_task_group() as group:
        group.start_soon(writes.run)
        await writes.replies.submit(early).wait()
        for handle in [writes.extractions.submit(r) for r in records]:
            await handle.wait()
        group.cancel_scope.cancel()
    assert documents.extracted_ids_sync(["c1", "c2", "c3"]) == {"c1", "c2"}
    assert documents.extracted_ids_sync([]) == set()
    # a chunk extracted twice in one batch (shared by two documents) keeps one extraction
    assert await rows(backend_db, "SELECT chunk_id, result, raw FROM extractions ORDER BY chunk_id") == [
        ("c1", '{"other": true}', '["raw 3"]'), ("c2", '{"entities": [2]}', '["raw 2", "ré"]')]
    one, two = await documents.get("d1"), await documents.get("d2")
    assert one is not None and two is not None and (one["chunks_done"], two["chunks_done"]) == (2, 1)
    assert await rows(backend_db, "SELECT kind, key, response, hits FROM llm_cache ORDER BY key") == [
        ("extract", "k0", "response 0", 0), ("extract", "k1", "response 1", 2)]
    # one stored already stays as it is
    await documents.start([("d1", 3, 2)])
    async with anyio.create_task_group() as group:
        group.start_soon(writes.run)
        await writes.extractions.submit(ExtractionRecord("d1", "c2", "m2", "{}", [], [], [])).wait()
        group.cancel_scope.cancel()
    assert await rows(backend_db, "SELECT model, result FROM extractions WHERE chunk_id = 'c2'") == [
        ("m", '{"entities": [2]}')]
    one = await documents.get("d1")
    assert one is not None and one["chunks_done"] == 3


async def test_chunks_counts_and_deletion_effects(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("a", "a.txt", 0), record("b", "b.txt", 1))
    await seed_graph(backend_db)
    await execute(backend_db, "INSERT INTO extractions VALUES ('c2', 'm', '{\"r\": 2}', '[]', ?)", [BASE])
    assert await documents.stored_chunk_ids(["c1", "c4", "c9"]) == {"c1", "c4"}
    assert await documents.stored_chunk_ids([]) == set()
    assert await documents.orphaned_chunks("a", []) == ["c1", "c2"]
    assert await documents.orphaned_chunks("a", ["c2"]) == ["c1"]
    assert await documents.orphaned_chunks("b", []) == ["c4"]
    assert await documents.orphaned_chunks("missing", []) == []
    assert await documents.counts("a") == {"chunks": 3, "entities": 3, "relations": 2}
    assert await documents.counts("b") == {"chunks": 2, "entities": 3, "relations": 2}
    assert await documents.counts("missing") == {"chunks": 0, "entities": 0, "relations": 0}
    assert await documents.entity_counts(["a", "b", "missing"]) == {"a": 3, "b": 3}
    assert await documents.entity_counts([]) == {}
    page, total = await documents.chunks("a", 2, 1)
    assert total == 3 and page == [
        {"ord": 1, "id": "c2", "content": "two", "tokens": 3, "result": '{"r": 2}'},
        {"ord": 2, "id": "c3", "content": "three", "tokens": 5, "result": None}]
    assert await documents.chunks("missing", 10, 0) == ([], 0)
    # a's own chunks are c1 and c2: alice (c1) goes, bob (c1, c4) stays updated; alice-bob (c1, c2)
    # goes, alice-carol (c2, c4) stays updated
    assert await documents.deletion_effects("a") == {
        "chunks": 2, "entities_removed": 1, "entities_updated": 1, "relations_removed": 1, "relations_updated": 1}
    assert await documents.deletion_effects("b") == {
        "chunks": 1, "entities_removed": 1, "entities_updated": 1, "relations_removed": 1, "relations_updated": 1}
    assert await documents.deletion_effects("missing") == {
        "chunks": 0, "entities_removed": 0, "entities_updated": 0, "relations_removed": 0, "relations_updated": 0}
    await documents.delete_unprocessed("b")
    assert await documents.orphaned_chunks("a", []) == ["c1", "c2", "c3"]


async def test_health_counts_documents_and_says_whether_writes_are_taken(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await add(documents, record("d1", "one.txt", 0), record("d2", "two.txt", 1), record("d3", "three.txt", 2))
    await documents.set_status("d2", "processed")
    await documents.set_status("d3", "failed", "no")
    health = await anyio.to_thread.run_sync(documents.health_sync)
    assert health.documents == {"pending": 1, "processing": 0, "processed": 1, "failed": 1, "total": 3}
    assert health.writable is True
    if backend_db[0] == "embedded":   # a data directory: its free space
        assert health.free_bytes is not None and health.free_bytes > 0 and health.stored_bytes is None
    else:   # a server's disk is not visible to a client; what the base's tables take is
        assert health.free_bytes is None and health.stored_bytes is not None and health.stored_bytes > 0
    condition = documents.condition()
    assert (condition.failure, condition.reopened) == (None, 0)


async def test_postgresql_health_says_a_read_only_server_takes_no_writes(pg_server: str, pg_schema: str) -> None:
    """A server that refuses writes (here: the session's transactions read-only, as on a standby) is
    reported, not raised (PostgreSQL only: the embedded store checks its directory's permissions)."""
    db = PgDatabase(pg_server, pg_schema)

    def probe(con: Any) -> tuple[bool, bool]:
        con.execute("SET default_transaction_read_only = on")
        try:
            refused = takes_writes(con)
        finally:
            con.execute("RESET default_transaction_read_only")
        return refused, takes_writes(con)

    try:
        assert await db.read(probe) == (False, True)
    finally:
        db.close()


async def test_a_missing_table_raises_a_read_error(backend_db: tuple[str, Any]) -> None:
    documents = documents_of(backend_db)
    await execute(backend_db, "DROP TABLE documents", [])
    with pytest.raises(documents.read_errors):
        await documents.get("d1")
