"""The documents' tables in PostgreSQL: the SQL of documents, their progress, their chunks and
extractions (``PgDocuments``, ``store.tables.documents``), twin of ``proxy/store/duckdb/documents.py``:
the same rows, orders and answers, run through ``PgDatabase``'s writer or its readers."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import psycopg

from proxy.core.errors import GraphGateError
from proxy.core.llm_cache import CacheEntry
from proxy.store.batching import BatchWriter, CommitGroup
from proxy.store.clock import now
from proxy.store.postgres.cache import write_cache
from proxy.store.postgres.connection import Con, PgDatabase, holds_nul, set_meta
from proxy.store.protocols.documents import (
    SORTS,
    STATUSES,
    ExtractionRecord,
    NewDocument,
    Started,
    StorageCondition,
    StorageHealth,
)
from proxy.store.sql_documents import SqlDocuments

_COLUMNS = ("id", "name", "mime", "size", "status", "error", "chunks_total", "chunks_done", "replaces",
            "created_at", "updated_at", "processed_at", "metadata")
_SELECT = ", ".join(_COLUMNS)
# DuckDB compares strings byte by byte; the server's collation may not: sorts on text say "C"
_TEXT_SORTS = ("name", "status")
HEALTH_KEY = "health_probe"   # the meta row health_sync writes to learn that writes are taken


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    doc = dict(zip(_COLUMNS, values, strict=True))
    doc["metadata"] = json.loads(doc["metadata"]) if isinstance(doc["metadata"], str) else doc["metadata"]
    for stamp in ("created_at", "updated_at", "processed_at"):
        if isinstance(doc[stamp], datetime):
            doc[stamp] = doc[stamp].isoformat(timespec="milliseconds") + "Z"
    return doc


def _one(con: Con, query: str, args: Any) -> Any:
    """The single value an aggregate query answers."""
    row = con.execute(query, args).fetchone()
    assert row is not None  # an aggregate always answers one row
    return row[0]


def get_document(con: Con, document_id: str) -> dict[str, Any] | None:
    if holds_nul(document_id):   # no id holds one (PostgreSQL would refuse the statement)
        return None
    row = con.execute(f"SELECT {_SELECT} FROM documents WHERE id = %s", [document_id]).fetchone()
    return _row(row) if row else None


def get_documents(con: Con, document_ids: list[str]) -> dict[str, dict[str, Any]]:
    document_ids = [i for i in document_ids if not holds_nul(i)]
    rows = con.execute(f"SELECT {_SELECT} FROM documents WHERE id = ANY(%s::text[])", [document_ids]).fetchall()
    return {row[0]: _row(row) for row in rows}


def document_with_text(con: Con, document_id: str) -> tuple[dict[str, Any] | None, str]:
    if holds_nul(document_id):
        return None, ""
    row = con.execute(f"SELECT {_SELECT}, text FROM documents WHERE id = %s", [document_id]).fetchone()
    return (_row(row[:-1]), row[-1]) if row else (None, "")


def start_documents(con: Con, items: list[tuple[str, int, int]]) -> None:
    """Mark documents processing with their chunk counts (id, total, already extracted), in one statement."""
    # only documents still on their way: the record is not awaited, so a failure written meanwhile
    # (straight through the writer) must not be turned back into "processing"
    con.execute("UPDATE documents SET status = 'processing', error = NULL, chunks_total = s.total, "
                "chunks_done = s.done, updated_at = %s "
                "FROM unnest(%s::text[], %s::integer[], %s::integer[]) AS s(id, total, done) "
                "WHERE documents.id = s.id AND documents.status IN ('pending', 'processing')",
                [now(), [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]])


def documents_named(con: Con, name: str) -> list[dict[str, Any]]:
    rows = con.execute(f"SELECT {_SELECT} FROM documents WHERE name = %s ORDER BY created_at", [name]).fetchall()
    return [_row(r) for r in rows]


def list_documents(con: Con, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    if holds_nul(search):   # PostgreSQL's text cannot hold a NUL: no name has one (DuckDB finds none either)
        return [], 0
    where: list[str] = []
    args: list[Any] = []
    if ids is not None:   # a metadata filter's matches
        where.append("id = ANY(%s::text[])")
        args.append(ids)
    if status:
        where.append("status = %s")
        args.append(status)
    if search:
        where.append("name ILIKE %s ESCAPE '\\'")
        args.append("%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    order = sort if sort in SORTS else "created_at"
    collate = ' COLLATE "C"' if order in _TEXT_SORTS else ""
    direction = "DESC" if descending else "ASC"
    total = _one(con, f"SELECT count(*) FROM documents {clause}", args)
    rows = con.execute(f"SELECT {_SELECT} FROM documents {clause} ORDER BY {order}{collate} {direction}, "
                       'id COLLATE "C" LIMIT %s OFFSET %s', [*args, limit, offset]).fetchall()
    return [_row(r) for r in rows], total


def unfinished_ids(con: Con) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT id FROM documents WHERE status IN ('pending', 'processing') ORDER BY created_at").fetchall()]


def document_and_versions(con: Con, document_id: str, name: str) -> tuple[dict[str, Any] | None,
                                                                         list[dict[str, Any]]]:
    """The document with this id, if stored, and the stored documents with this name (oldest first)."""
    rows = [_row(r) for r in con.execute(f"SELECT {_SELECT} FROM documents WHERE id = %s OR name = %s "
                                         "ORDER BY created_at", [document_id, name]).fetchall()]
    existing = next((r for r in rows if r["id"] == document_id), None)
    return existing, [r for r in rows if r["name"] == name and r["id"] != document_id]


def new_document_row(record: dict[str, Any]) -> dict[str, Any]:
    """The row ``insert_documents`` stores for ``record`` (which carries its ``created_at``), as
    ``get_document`` would read it back."""
    stamp = record["created_at"]
    return _row((record["id"], record["name"], record["mime"], record["size"], "pending", None, 0, 0,
                 record.get("replaces"), stamp, stamp, None, record.get("metadata") or {}))


def insert_documents(con: Con, items: list[tuple[dict[str, Any], str]]) -> None:
    """New documents, pending, in one statement (uploads arriving together share a transaction)."""
    stamp = now()
    con.execute("INSERT INTO documents (id, name, mime, size, status, text, replaces, created_at, updated_at, "
                "metadata) SELECT id, name, mime, size, 'pending', text, replaces, created_at, created_at, metadata "
                "FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::text[], %s::text[], "
                "%s::timestamp[], %s::text[]) AS d(id, name, mime, size, text, replaces, created_at, metadata) "
                # the same content uploaded through two replicas at once: one document (its id is its hash)
                "ON CONFLICT (id) DO NOTHING",
                [[d["id"] for d, _ in items], [d["name"] for d, _ in items], [d["mime"] for d, _ in items],
                 [d["size"] for d, _ in items], [text for _, text in items], [d.get("replaces") for d, _ in items],
                 [d.get("created_at") or stamp for d, _ in items],
                 [json.dumps(d.get("metadata") or {}, ensure_ascii=False) for d, _ in items]])


def set_metadata(con: Con, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """Replace the document's metadata; its row as now stored (None: no such document)."""
    con.execute("UPDATE documents SET metadata = %s, updated_at = %s WHERE id = %s",
                [json.dumps(metadata, ensure_ascii=False), now(), document_id])
    return get_document(con, document_id)


def searchable_metadata(con: Con) -> list[tuple[str, dict[str, Any]]]:
    """(name, metadata) of every processed document: what retrieval's filters match against (the
    in-memory rows know a chunk's documents by name)."""
    return [(name, json.loads(metadata)) for name, metadata in con.execute(
        "SELECT name, metadata FROM documents WHERE status = 'processed'").fetchall()]


def metadata_of(con: Con, ids: list[str] | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
    """id -> (name, metadata) of the documents (all of them when ``ids`` is None)."""
    if ids is None:
        rows = con.execute("SELECT id, name, metadata FROM documents").fetchall()
    else:
        rows = con.execute("SELECT id, name, metadata FROM documents WHERE id = ANY(%s::text[])", [ids]).fetchall()
    return {i: (name, json.loads(metadata)) for i, name, metadata in rows}


def delete_unprocessed(con: Con, document_id: str) -> None:
    con.execute("DELETE FROM document_chunks WHERE document_id = %s", [document_id])
    con.execute("DELETE FROM documents WHERE id = %s", [document_id])


def set_status(con: Con, document_id: str, status: str, error: str | None = None,
               total: int | None = None, done: int | None = None) -> None:
    # a document failed or sent back to pending is no replica's any more (proxy/store/postgres/queue.py)
    con.execute("UPDATE documents SET status = %s, error = %s, chunks_total = coalesce(%s, chunks_total), "
                "chunks_done = coalesce(%s, chunks_done), updated_at = %s, "
                "lease_owner = CASE WHEN %s = 'processing' THEN lease_owner END, "
                "lease_until = CASE WHEN %s = 'processing' THEN lease_until END WHERE id = %s",
                [status, error, total, done, now(), status, status, document_id])


def extracted_ids(con: Con, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in con.execute(
        "SELECT chunk_id FROM extractions WHERE chunk_id = ANY(%s::text[])", [chunk_ids]).fetchall()}


def stored_chunk_ids(con: Con, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in con.execute("SELECT id FROM chunks WHERE id = ANY(%s::text[])", [chunk_ids]).fetchall()}


def orphaned_chunks(con: Con, document_id: str, keep: list[str]) -> list[str]:
    """Chunks of ``document_id`` that no other document links to and that are not in ``keep``."""
    rows = con.execute("""
        SELECT DISTINCT chunk_id FROM document_chunks d
        WHERE document_id = %s AND NOT EXISTS (
            SELECT 1 FROM document_chunks o WHERE o.chunk_id = d.chunk_id AND o.document_id <> d.document_id)
        """, [document_id]).fetchall()
    kept = set(keep)
    return sorted(r[0] for r in rows if r[0] not in kept)


def record_extractions(con: Con, records: list[ExtractionRecord]) -> None:
    """Store finished chunk extractions in bulk (one statement per table, not per chunk), with
    their LLM cache entries and each document's progress."""
    stamp = now()
    rows = {chunk_id: (chunk_id, model, result, json.dumps(raw, ensure_ascii=False))
            for _, chunk_id, model, result, raw, _, _ in records}
    # a chunk extracted already (by another document, or another replica) keeps its first extraction
    con.execute("INSERT INTO extractions (chunk_id, model, result, raw, created_at) "
                "SELECT chunk_id, model, result, raw, %s "
                "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS e(chunk_id, model, result, raw) "
                "ON CONFLICT (chunk_id) DO NOTHING",
                [stamp, *([r[i] for r in rows.values()] for i in range(4))])
    write_cache(con, [e for r in records for e in r[5]], [h for r in records for h in r[6]])
    progress: dict[str, int] = {}
    for document_id, *_ in records:
        progress[document_id] = progress.get(document_id, 0) + 1
    con.execute("UPDATE documents SET chunks_done = chunks_done + p.done, updated_at = %s "
                "FROM unnest(%s::text[], %s::integer[]) AS p(id, done) WHERE documents.id = p.id",
                [stamp, list(progress), list(progress.values())])


def save_replies(con: Con, entries: list[CacheEntry]) -> None:
    """Answered model calls committed ahead of the record that will carry them (a crash in
    between must not make them be paid for again)."""
    write_cache(con, entries, [])


def document_counts(con: Con, document_id: str) -> dict[str, int]:
    """Chunks, entities and relations a document's chunks source (joins on unnested source ids,
    as the embedded store does)."""
    chunks = _one(con, "SELECT count(DISTINCT chunk_id) FROM document_chunks WHERE document_id = %s",
                  [document_id])
    counts = {"chunks": chunks}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        counts[table] = _one(con, f"""
            WITH mine AS (SELECT DISTINCT chunk_id FROM document_chunks WHERE document_id = %s),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table})
            SELECT count(DISTINCT s.id) FROM sourced s JOIN mine USING (chunk_id)""", [document_id])
    return counts


def entity_counts(con: Con, document_ids: list[str]) -> dict[str, int]:
    """Entities per document for one page of the table, in one query (a join on unnested source ids)."""
    if not document_ids:
        return {}
    rows = con.execute("""
        WITH links AS (SELECT DISTINCT document_id, chunk_id FROM document_chunks
                       WHERE document_id = ANY(%(ids)s::text[])),
             sourced AS (SELECT name_key, unnest(source_ids) AS chunk_id FROM entities)
        SELECT l.document_id, count(DISTINCT s.name_key) FROM links l JOIN sourced s USING (chunk_id)
        GROUP BY 1""", {"ids": document_ids}).fetchall()
    return {document_id: count for document_id, count in rows}


def document_chunks(con: Con, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    total = _one(con, "SELECT count(*) FROM document_chunks WHERE document_id = %s", [document_id])
    rows = con.execute("""
        WITH page AS (SELECT ord, chunk_id FROM document_chunks WHERE document_id = %s
                      ORDER BY ord LIMIT %s OFFSET %s)
        SELECT p.ord, p.chunk_id, c.content, c.tokens, e.result FROM page p
        LEFT JOIN chunks c ON c.id = p.chunk_id LEFT JOIN extractions e ON e.chunk_id = p.chunk_id
        ORDER BY p.ord""", [document_id, limit, offset]).fetchall()
    return [{"ord": order, "id": chunk_id, "content": content, "tokens": tokens, "result": result}
            for order, chunk_id, content, tokens, result in rows], total


def deletion_effects(con: Con, document_id: str) -> dict[str, int]:
    """What deleting the document would remove and what it would only update."""
    orphaned = orphaned_chunks(con, document_id, [])
    counts = {"chunks": len(orphaned)}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        row = con.execute(f"""
            WITH gone AS (SELECT DISTINCT unnest(%(gone)s::text[]) AS chunk_id),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table}),
                 per AS (SELECT s.id, count(*) AS total, count(g.chunk_id) AS hit
                         FROM sourced s LEFT JOIN gone g USING (chunk_id) GROUP BY s.id)
            SELECT count(*) FILTER (WHERE hit = total), count(*) FILTER (WHERE hit < total)
            FROM per WHERE hit > 0""", {"gone": orphaned}).fetchone()
        assert row is not None  # an aggregate always answers one row
        removed, updated = row
        counts[f"{table}_removed"], counts[f"{table}_updated"] = removed, updated
    return counts


def status_counts(con: Con) -> dict[str, int]:
    return {status: count for status, count in con.execute(
        "SELECT status, count(*) FROM documents GROUP BY status").fetchall()}


def stored_bytes(con: Con) -> int:
    """What the knowledge base's tables take on the server (its schema's tables with their indexes
    and TOAST): the other bases of the database are not its."""
    return int(_one(con, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                         "JOIN pg_namespace n ON n.oid = c.relnamespace "
                         "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')", []))


def takes_writes(con: Con) -> bool:
    """Whether the server commits a write to this base: a meta row, written in autocommit (its own
    transaction, no lock a merge holds). A read-only server, a revoked privilege or a full disk
    refuse it; a lost connection is raised, for the reader's retry."""
    try:
        set_meta(con, HEALTH_KEY, now().isoformat())
    except psycopg.Error:
        if con.broken:
            raise
        return False
    return True


class PgIngestWrites:
    """The pipeline's small writes in one ``CommitGroup``: uploads, "processing" statuses and
    finished extractions share transactions (a lone write is committed at once, writes that arrive
    while the store is busy, a merge, go together); a first extraction pass answered while its
    chunk still waits for gleaning is committed at once."""

    def __init__(self, db: PgDatabase) -> None:
        self.group = CommitGroup(db)
        self.uploads: BatchWriter[NewDocument] = self.group.writer(insert_documents)
        self.starts: BatchWriter[Started] = self.group.writer(start_documents)
        self.replies: BatchWriter[CacheEntry] = self.group.writer(save_replies)
        self.extractions: BatchWriter[ExtractionRecord] = self.group.writer(record_extractions)

    async def run(self) -> None:
        await self.group.run()


class PgDocuments(SqlDocuments):
    """``DocumentTables`` over PostgreSQL."""

    # psycopg's errors that the connection does not translate (it turns a lost server into StorageError)
    read_errors: tuple[type[BaseException], ...] = (psycopg.Error, GraphGateError)
    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db

    def ingest_writes(self) -> PgIngestWrites:
        return PgIngestWrites(self.db)

    def health_sync(self) -> StorageHealth:
        """The embedded store checks its data directory's permissions and free space; a server store
        has no directory of ours. ``writable``: the server committed a write to this base just now
        (not through the writer: a probe must not queue behind a merge's lock). ``free_bytes``:
        None, the server's disk is not visible to a client (its DiskFull reaches requests as 507);
        ``stored_bytes`` says what the base takes instead."""
        counts, writable, size = self.db.read_sync(
            lambda con: (status_counts(con), takes_writes(con), stored_bytes(con)))
        documents = {status: int(counts.get(status, 0)) for status in STATUSES}
        documents["total"] = sum(documents.values())
        return StorageHealth(documents, writable, None, stored_bytes=size)

    def condition(self) -> StorageCondition:
        # a server store is never reopened: a lost server is retried per statement by the pool
        return StorageCondition(self.db.failure, 0)
