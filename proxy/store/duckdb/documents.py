"""The documents' tables in DuckDB: the SQL of documents, their progress, their chunks and
extractions (``DuckDBDocuments``, ``store.tables.documents``, runs it through the single writer or
the readers)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime
from typing import Any

import duckdb

from proxy.core.errors import GraphGateError
from proxy.core.llm_cache import CacheEntry
from proxy.store.batching import BatchWriter, CommitGroup
from proxy.store.clock import now
from proxy.store.duckdb.cache import write_cache
from proxy.store.duckdb.connection import Con, Database
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
    row = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents WHERE id = ?", [document_id]).fetchone()
    return _row(row) if row else None


def get_documents(con: Con, document_ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents WHERE id = ANY(?::VARCHAR[])",
                       [document_ids]).fetchall()
    return {row[0]: _row(row) for row in rows}


def document_with_text(con: Con, document_id: str) -> tuple[dict[str, Any] | None, str]:
    row = con.execute(f"SELECT {', '.join(_COLUMNS)}, text FROM documents WHERE id = ?", [document_id]).fetchone()
    return (_row(row[:-1]), row[-1]) if row else (None, "")


def start_documents(con: Con, items: list[tuple[str, int, int]]) -> None:
    """Mark documents processing with their chunk counts (id, total, already extracted), in one statement."""
    # only documents still on their way: the record is not awaited, so a failure written meanwhile
    # (straight through the writer) must not be turned back into "processing"
    con.execute("UPDATE documents SET status = 'processing', error = NULL, chunks_total = s.total, "
                "chunks_done = s.done, updated_at = $4 FROM (SELECT unnest($1::VARCHAR[]) AS id, "
                "unnest($2::INTEGER[]) AS total, unnest($3::INTEGER[]) AS done) s WHERE documents.id = s.id "
                "AND documents.status IN ('pending', 'processing')",
                [[i[0] for i in items], [i[1] for i in items], [i[2] for i in items], now()])


def documents_named(con: Con, name: str) -> list[dict[str, Any]]:
    rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents WHERE name = ? ORDER BY created_at",
                       [name]).fetchall()
    return [_row(r) for r in rows]


def list_documents(con: Con, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    where: list[str] = []
    args: list[Any] = []
    if ids is not None:   # a metadata filter's matches
        where.append("id = ANY(?::VARCHAR[])")
        args.append(ids)
    if status:
        where.append("status = ?")
        args.append(status)
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append("%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    order = sort if sort in SORTS else "created_at"
    direction = "DESC" if descending else "ASC"
    total = _one(con, f"SELECT count(*) FROM documents {clause}", args)
    rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents {clause} ORDER BY {order} {direction}, id "
                       "LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return [_row(r) for r in rows], total


def unfinished_ids(con: Con) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT id FROM documents WHERE status IN ('pending', 'processing') ORDER BY created_at").fetchall()]


def document_and_versions(con: Con, document_id: str, name: str) -> tuple[dict[str, Any] | None,
                                                                         list[dict[str, Any]]]:
    """The document with this id, if stored, and the stored documents with this name (oldest first)."""
    rows = [_row(r) for r in con.execute(f"SELECT {', '.join(_COLUMNS)} FROM documents WHERE id = ? OR name = ? "
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
    stamps = [d.get("created_at") or stamp for d, _ in items]
    con.execute("INSERT INTO documents (id, name, mime, size, status, text, replaces, created_at, updated_at, "
                "metadata) SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), "
                "unnest($4::BIGINT[]), 'pending', unnest($5::VARCHAR[]), unnest($6::VARCHAR[]), "
                "unnest($7::TIMESTAMP[]), unnest($7::TIMESTAMP[]), unnest($8::VARCHAR[])",
                [[d["id"] for d, _ in items], [d["name"] for d, _ in items], [d["mime"] for d, _ in items],
                 [d["size"] for d, _ in items], [text for _, text in items], [d.get("replaces") for d, _ in items],
                 stamps, [json.dumps(d.get("metadata") or {}, ensure_ascii=False) for d, _ in items]])


def set_metadata(con: Con, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """Replace the document's metadata; its row as now stored (None: no such document)."""
    con.execute("UPDATE documents SET metadata = ?, updated_at = ? WHERE id = ?",
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
        rows = con.execute("SELECT id, name, metadata FROM documents WHERE id = ANY(?::VARCHAR[])", [ids]).fetchall()
    return {i: (name, json.loads(metadata)) for i, name, metadata in rows}


def delete_unprocessed(con: Con, document_id: str) -> None:
    con.execute("DELETE FROM document_chunks WHERE document_id = ?", [document_id])
    con.execute("DELETE FROM documents WHERE id = ?", [document_id])


def set_status(con: Con, document_id: str, status: str, error: str | None = None,
               total: int | None = None, done: int | None = None) -> None:
    con.execute("UPDATE documents SET status = ?, error = ?, chunks_total = coalesce(?, chunks_total), "
                "chunks_done = coalesce(?, chunks_done), updated_at = ? WHERE id = ?",
                [status, error, total, done, now(), document_id])


def extracted_ids(con: Con, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in con.execute(
        "SELECT chunk_id FROM extractions WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))", [chunk_ids]).fetchall()}


def stored_chunk_ids(con: Con, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in con.execute(
        "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::VARCHAR[]))", [chunk_ids]).fetchall()}


def orphaned_chunks(con: Con, document_id: str, keep: list[str]) -> list[str]:
    """Chunks of ``document_id`` that no other document links to and that are not in ``keep``."""
    rows = con.execute("""
        SELECT DISTINCT chunk_id FROM document_chunks d
        WHERE document_id = ? AND NOT EXISTS (
            SELECT 1 FROM document_chunks o WHERE o.chunk_id = d.chunk_id AND o.document_id <> d.document_id)
        """, [document_id]).fetchall()
    kept = set(keep)
    return sorted(r[0] for r in rows if r[0] not in kept)


def record_extractions(con: Con, records: list[ExtractionRecord]) -> None:
    """Store finished chunk extractions in bulk (one statement per table, not per chunk), with
    their LLM cache entries and each document's progress. Rows go in as list parameters:
    registering an Arrow table costs about a millisecond a time, more than the insert."""
    stamp = now()
    rows = {chunk_id: (chunk_id, model, result, json.dumps(raw, ensure_ascii=False))
            for _, chunk_id, model, result, raw, _, _ in records}
    # OR IGNORE checks the primary key's index; NOT EXISTS would scan every stored extraction
    con.execute("INSERT OR IGNORE INTO extractions SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), "
                "unnest($3::VARCHAR[]), unnest($4::VARCHAR[]), $5",
                [*([r[i] for r in rows.values()] for i in range(4)), stamp])
    write_cache(con, [e for r in records for e in r[5]], [h for r in records for h in r[6]])
    progress: dict[str, int] = {}
    for document_id, *_ in records:
        progress[document_id] = progress.get(document_id, 0) + 1
    con.execute("UPDATE documents SET chunks_done = chunks_done + p.done, updated_at = $3 FROM "
                "(SELECT unnest($1::VARCHAR[]) AS id, unnest($2::INTEGER[]) AS done) p WHERE documents.id = p.id",
                [list(progress), list(progress.values()), stamp])


def save_replies(con: Con, entries: list[CacheEntry]) -> None:
    """Answered model calls committed ahead of the record that will carry them (a crash in
    between must not make them be paid for again)."""
    write_cache(con, entries, [])


def document_counts(con: Con, document_id: str) -> dict[str, int]:
    """Chunks, entities and relations a document's chunks source (joins on unnested source ids:
    ``list_has_any`` against every row costs a second at 100k entities)."""
    chunks = _one(con, "SELECT count(DISTINCT chunk_id) FROM document_chunks WHERE document_id = ?",
                  [document_id])
    counts = {"chunks": chunks}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        counts[table] = _one(con, f"""
            WITH mine AS (SELECT DISTINCT chunk_id FROM document_chunks WHERE document_id = ?),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table})
            SELECT count(DISTINCT s.id) FROM sourced s JOIN mine USING (chunk_id)""", [document_id])
    return counts


def entity_counts(con: Con, document_ids: list[str]) -> dict[str, int]:
    """Entities per document for one page of the table, in one query (a join on unnested source
    ids: ``list_has_any`` against every entity costs seconds at 100k entities)."""
    if not document_ids:
        return {}
    rows = con.execute("""
        WITH links AS (SELECT DISTINCT document_id, chunk_id FROM document_chunks
                       WHERE document_id IN (SELECT unnest($ids::VARCHAR[]))),
             sourced AS (SELECT name_key, unnest(source_ids) AS chunk_id FROM entities)
        SELECT l.document_id, count(DISTINCT s.name_key) FROM links l JOIN sourced s USING (chunk_id)
        GROUP BY 1""", {"ids": document_ids}).fetchall()
    return dict(rows)


def document_chunks(con: Con, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    total = _one(con, "SELECT count(*) FROM document_chunks WHERE document_id = ?", [document_id])
    rows = con.execute("""
        WITH page AS (SELECT ord, chunk_id FROM document_chunks WHERE document_id = ? ORDER BY ord LIMIT ? OFFSET ?)
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
            WITH gone AS (SELECT DISTINCT unnest($gone::VARCHAR[]) AS chunk_id),
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
    return dict(con.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())


class DuckDBIngestWrites:
    """The pipeline's small writes in one ``CommitGroup``: uploads, "processing" statuses and
    finished extractions share transactions (a lone write is committed at once, writes that arrive
    while the store is busy, a merge, go together); a first extraction pass answered while its
    chunk still waits for gleaning is committed at once."""

    def __init__(self, db: Database) -> None:
        self.group = CommitGroup(db)
        self.uploads: BatchWriter[NewDocument] = self.group.writer(insert_documents)
        self.starts: BatchWriter[Started] = self.group.writer(start_documents)
        self.replies: BatchWriter[CacheEntry] = self.group.writer(save_replies)
        self.extractions: BatchWriter[ExtractionRecord] = self.group.writer(record_extractions)

    async def run(self) -> None:
        await self.group.run()


class DuckDBDocuments(SqlDocuments):
    """``DocumentTables`` over DuckDB."""

    read_errors: tuple[type[BaseException], ...] = (duckdb.Error, OSError, GraphGateError)
    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db

    def ingest_writes(self) -> DuckDBIngestWrites:
        return DuckDBIngestWrites(self.db)

    def health_sync(self) -> StorageHealth:
        counts = self.db.read_sync(status_counts)
        documents = {status: int(counts.get(status, 0)) for status in STATUSES}
        documents["total"] = sum(documents.values())
        database = self.db.path
        folder = database.parent
        writable = os.access(folder, os.W_OK) and (not database.exists() or os.access(database, os.W_OK))
        return StorageHealth(documents, writable, shutil.disk_usage(folder).free)

    def condition(self) -> StorageCondition:
        return StorageCondition(self.db.failure, self.db.reopened)
