"""The documents' tables over either backend (``DocumentTables``, proxy/store/protocols/documents.py):
the SQL of documents, their progress, their chunks and extractions, written once in the SQL both
engines speak (proxy/store/sql_dialect.py). A backend adds its statements where the engines part
(``sql``: a document's status, which PostgreSQL's replicas also lease), its engine's errors and its
health."""

from __future__ import annotations

import json
from datetime import datetime
from types import ModuleType
from typing import Any

from proxy.core.llm_cache import CacheEntry
from proxy.store.batching import BatchWriter, CommitGroup
from proxy.store.clock import now
from proxy.store.protocols.documents import (
    SORTS,
    ExtractionRecord,
    NewDocument,
    Started,
    StorageCondition,
    StorageHealth,
)
from proxy.store.sql_cache import write_cache
from proxy.store.sql_dialect import Sql, containing
from proxy.store.sql_runner import Runner, SqlAdapter

_COLUMNS = ("id", "name", "mime", "size", "status", "error", "chunks_total", "chunks_done", "replaces",
            "created_at", "updated_at", "processed_at", "metadata")
_SELECT = ", ".join(_COLUMNS)


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    doc = dict(zip(_COLUMNS, values, strict=True))
    doc["metadata"] = json.loads(doc["metadata"]) if isinstance(doc["metadata"], str) else doc["metadata"]
    for stamp in ("created_at", "updated_at", "processed_at"):
        if isinstance(doc[stamp], datetime):
            doc[stamp] = doc[stamp].isoformat(timespec="milliseconds") + "Z"
    return doc


def get_document(sql: Sql, document_id: str) -> dict[str, Any] | None:
    if sql.unstorable(document_id):   # no stored id holds one
        return None
    row = sql.execute(f"SELECT {_SELECT} FROM documents WHERE id = ?", [document_id]).fetchone()
    return _row(row) if row else None


def get_documents(sql: Sql, document_ids: list[str]) -> dict[str, dict[str, Any]]:
    document_ids = [i for i in document_ids if not sql.unstorable(i)]
    rows = sql.execute(f"SELECT {_SELECT} FROM documents WHERE {sql.among('id', 'text')}", [document_ids]).fetchall()
    return {row[0]: _row(row) for row in rows}


def document_with_text(sql: Sql, document_id: str) -> tuple[dict[str, Any] | None, str]:
    if sql.unstorable(document_id):
        return None, ""
    row = sql.execute(f"SELECT {_SELECT}, text FROM documents WHERE id = ?", [document_id]).fetchone()
    return (_row(row[:-1]), row[-1]) if row else (None, "")


def start_documents(sql: Sql, items: list[tuple[str, int, int]]) -> None:
    """Mark documents processing with their chunk counts (id, total, already extracted), in one statement."""
    # only documents still on their way: the record is not awaited, so a failure written meanwhile
    # (straight through the writer) must not be turned back into "processing"
    sql.execute("UPDATE documents SET status = 'processing', error = NULL, chunks_total = s.total, "
                "chunks_done = s.done, updated_at = ? FROM (SELECT unnest(?::text[]) AS id, "
                "unnest(?::integer[]) AS total, unnest(?::integer[]) AS done) s WHERE documents.id = s.id "
                "AND documents.status IN ('pending', 'processing')",
                [now(), [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]])


def documents_named(sql: Sql, name: str) -> list[dict[str, Any]]:
    if sql.unstorable(name):
        return []
    rows = sql.execute(f"SELECT {_SELECT} FROM documents WHERE name = ? ORDER BY created_at", [name]).fetchall()
    return [_row(r) for r in rows]


def list_documents(sql: Sql, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    if sql.unstorable(search, status):   # no name holds a NUL
        return [], 0
    where: list[str] = []
    args: list[Any] = []
    if ids is not None:   # a metadata filter's matches
        where.append(sql.among("id", "text"))
        args.append(ids)
    if status:
        where.append("status = ?")
        args.append(status)
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append(containing(search))
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    order = sort if sort in SORTS else "created_at"
    # texts in byte order in both engines (a server's default collation may not be)
    collate = ' COLLATE "C"' if order in ("name", "status") else ""
    direction = "DESC" if descending else "ASC"
    total = sql.one(f"SELECT count(*) FROM documents {clause}", args)
    rows = sql.execute(f"SELECT {_SELECT} FROM documents {clause} ORDER BY {order}{collate} {direction}, "
                       'id COLLATE "C" LIMIT ? OFFSET ?', [*args, limit, offset]).fetchall()
    return [_row(r) for r in rows], total


def unfinished_ids(sql: Sql) -> list[str]:
    return [r[0] for r in sql.execute(
        "SELECT id FROM documents WHERE status IN ('pending', 'processing') ORDER BY created_at").fetchall()]


def document_and_versions(sql: Sql, document_id: str, name: str) -> tuple[dict[str, Any] | None,
                                                                         list[dict[str, Any]]]:
    """The document with this id, if stored, and the stored documents with this name (oldest first)."""
    rows = [_row(r) for r in sql.execute(f"SELECT {_SELECT} FROM documents WHERE id = ? OR name = ? "
                                         "ORDER BY created_at", [document_id, name]).fetchall()]
    existing = next((r for r in rows if r["id"] == document_id), None)
    return existing, [r for r in rows if r["name"] == name and r["id"] != document_id]


def new_document_row(record: dict[str, Any]) -> dict[str, Any]:
    """The row ``insert_documents`` stores for ``record`` (which carries its ``created_at``), as
    ``get_document`` would read it back."""
    stamp = record["created_at"]
    return _row((record["id"], record["name"], record["mime"], record["size"], "pending", None, 0, 0,
                 record.get("replaces"), stamp, stamp, None, record.get("metadata") or {}))


def insert_documents(sql: Sql, items: list[tuple[dict[str, Any], str]]) -> None:
    """New documents, pending, in one statement (uploads arriving together share a transaction)."""
    stamp = now()
    stamps = [d.get("created_at") or stamp for d, _ in items]
    sql.execute("INSERT INTO documents (id, name, mime, size, status, text, replaces, created_at, updated_at, "
                "metadata) SELECT id, name, mime, size, 'pending', text, replaces, created_at, created_at, metadata "
                "FROM (SELECT unnest(?::text[]) AS id, unnest(?::text[]) AS name, unnest(?::text[]) AS mime, "
                "unnest(?::bigint[]) AS size, unnest(?::text[]) AS text, unnest(?::text[]) AS replaces, "
                "unnest(?::timestamp[]) AS created_at, unnest(?::text[]) AS metadata) d "
                # the same content uploaded through two replicas at once: one document (its id is its hash)
                "ON CONFLICT (id) DO NOTHING",
                [[d["id"] for d, _ in items], [d["name"] for d, _ in items], [d["mime"] for d, _ in items],
                 [d["size"] for d, _ in items], [text for _, text in items], [d.get("replaces") for d, _ in items],
                 stamps, [json.dumps(d.get("metadata") or {}, ensure_ascii=False) for d, _ in items]])


def set_metadata(sql: Sql, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """Replace the document's metadata; its row as now stored (None: no such document)."""
    sql.execute("UPDATE documents SET metadata = ?, updated_at = ? WHERE id = ?",
                [json.dumps(metadata, ensure_ascii=False), now(), document_id])
    return get_document(sql, document_id)


def searchable_metadata(sql: Sql) -> list[tuple[str, dict[str, Any]]]:
    """(name, metadata) of every processed document: what retrieval's filters match against (the
    in-memory rows know a chunk's documents by name)."""
    return [(name, json.loads(metadata)) for name, metadata in sql.execute(
        "SELECT name, metadata FROM documents WHERE status = 'processed'").fetchall()]


def metadata_of(sql: Sql, ids: list[str] | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
    """id -> (name, metadata) of the documents (all of them when ``ids`` is None)."""
    if ids is None:
        rows = sql.execute("SELECT id, name, metadata FROM documents").fetchall()
    else:
        rows = sql.execute(f"SELECT id, name, metadata FROM documents WHERE {sql.among('id', 'text')}",
                           [ids]).fetchall()
    return {i: (name, json.loads(metadata)) for i, name, metadata in rows}


def delete_unprocessed(sql: Sql, document_id: str) -> None:
    sql.execute("DELETE FROM document_chunks WHERE document_id = ?", [document_id])
    sql.execute("DELETE FROM documents WHERE id = ?", [document_id])


def extracted_ids(sql: Sql, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in sql.execute(
        f"SELECT chunk_id FROM extractions WHERE {sql.among('chunk_id', 'text')}", [chunk_ids]).fetchall()}


def stored_chunk_ids(sql: Sql, chunk_ids: list[str]) -> set[str]:
    if not chunk_ids:
        return set()
    return {r[0] for r in sql.execute(f"SELECT id FROM chunks WHERE {sql.among('id', 'text')}",
                                      [chunk_ids]).fetchall()}


def orphaned_chunks(sql: Sql, document_id: str, keep: list[str]) -> list[str]:
    """Chunks of ``document_id`` that no other document links to and that are not in ``keep``."""
    rows = sql.execute("""
        SELECT DISTINCT chunk_id FROM document_chunks d
        WHERE document_id = ? AND NOT EXISTS (
            SELECT 1 FROM document_chunks o WHERE o.chunk_id = d.chunk_id AND o.document_id <> d.document_id)
        """, [document_id]).fetchall()
    kept = set(keep)
    return sorted(r[0] for r in rows if r[0] not in kept)


def record_extractions(sql: Sql, records: list[ExtractionRecord]) -> None:
    """Store finished chunk extractions in bulk (one statement per table, not per chunk), with
    their LLM cache entries and each document's progress. Rows go in as list parameters:
    registering an Arrow table costs DuckDB about a millisecond a time, more than the insert."""
    stamp = now()
    rows = {chunk_id: (chunk_id, model, result, json.dumps(raw, ensure_ascii=False))
            for _, chunk_id, model, result, raw, _, _ in records}
    # a chunk extracted already (by another document, or another replica) keeps its first
    # extraction; the conflict is found in the primary key's index (NOT EXISTS would scan them all)
    sql.execute("INSERT INTO extractions (chunk_id, model, result, raw, created_at) "
                "SELECT unnest(?::text[]), unnest(?::text[]), unnest(?::text[]), unnest(?::text[]), ? "
                "ON CONFLICT (chunk_id) DO NOTHING",
                [*([r[i] for r in rows.values()] for i in range(4)), stamp])
    write_cache(sql, [e for r in records for e in r[5]], [h for r in records for h in r[6]])
    progress: dict[str, int] = {}
    for document_id, *_ in records:
        progress[document_id] = progress.get(document_id, 0) + 1
    sql.execute("UPDATE documents SET chunks_done = chunks_done + p.done, updated_at = ? FROM "
                "(SELECT unnest(?::text[]) AS id, unnest(?::integer[]) AS done) p WHERE documents.id = p.id",
                [stamp, list(progress), list(progress.values())])


def save_replies(sql: Sql, entries: list[CacheEntry]) -> None:
    """Answered model calls committed ahead of the record that will carry them (a crash in
    between must not make them be paid for again)."""
    write_cache(sql, entries, [])


def document_counts(sql: Sql, document_id: str) -> dict[str, int]:
    """Chunks, entities and relations a document's chunks source (joins on unnested source ids:
    ``list_has_any`` against every row costs DuckDB a second at 100k entities)."""
    chunks = sql.one("SELECT count(DISTINCT chunk_id) FROM document_chunks WHERE document_id = ?", [document_id])
    counts = {"chunks": int(chunks)}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        counts[table] = int(sql.one(f"""
            WITH mine AS (SELECT DISTINCT chunk_id FROM document_chunks WHERE document_id = ?),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table})
            SELECT count(DISTINCT s.id) FROM sourced s JOIN mine USING (chunk_id)""", [document_id]))
    return counts


def entity_counts(sql: Sql, document_ids: list[str]) -> dict[str, int]:
    """Entities per document for one page of the table, in one query (a join on unnested source
    ids: ``list_has_any`` against every entity costs DuckDB seconds at 100k entities)."""
    if not document_ids:
        return {}
    rows = sql.execute(f"""
        WITH links AS (SELECT DISTINCT document_id, chunk_id FROM document_chunks
                       WHERE {sql.among('document_id', 'text')}),
             sourced AS (SELECT name_key, unnest(source_ids) AS chunk_id FROM entities)
        SELECT l.document_id, count(DISTINCT s.name_key) FROM links l JOIN sourced s USING (chunk_id)
        GROUP BY 1""", [document_ids]).fetchall()
    return {document_id: int(count) for document_id, count in rows}


def document_chunks(sql: Sql, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    total = sql.one("SELECT count(*) FROM document_chunks WHERE document_id = ?", [document_id])
    rows = sql.execute("""
        WITH page AS (SELECT ord, chunk_id FROM document_chunks WHERE document_id = ? ORDER BY ord LIMIT ? OFFSET ?)
        SELECT p.ord, p.chunk_id, c.content, c.tokens, e.result FROM page p
        LEFT JOIN chunks c ON c.id = p.chunk_id LEFT JOIN extractions e ON e.chunk_id = p.chunk_id
        ORDER BY p.ord""", [document_id, limit, offset]).fetchall()
    return [{"ord": order, "id": chunk_id, "content": content, "tokens": tokens, "result": result}
            for order, chunk_id, content, tokens, result in rows], total


def deletion_effects(sql: Sql, document_id: str) -> dict[str, int]:
    """What deleting the document would remove and what it would only update."""
    orphaned = orphaned_chunks(sql, document_id, [])
    counts = {"chunks": len(orphaned)}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        row = sql.execute(f"""
            WITH gone AS (SELECT DISTINCT unnest(?::text[]) AS chunk_id),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table}),
                 per AS (SELECT s.id, count(*) AS total, count(g.chunk_id) AS hit
                         FROM sourced s LEFT JOIN gone g USING (chunk_id) GROUP BY s.id)
            SELECT count(*) FILTER (WHERE hit = total), count(*) FILTER (WHERE hit < total)
            FROM per WHERE hit > 0""", [orphaned]).fetchone()
        assert row is not None  # an aggregate always answers one row
        removed, updated = row
        counts[f"{table}_removed"], counts[f"{table}_updated"] = int(removed), int(updated)
    return counts


def status_counts(sql: Sql) -> dict[str, int]:
    return {status: int(count) for status, count in sql.execute(
        "SELECT status, count(*) FROM documents GROUP BY status").fetchall()}


class SqlIngestWrites:
    """The pipeline's small writes in one ``CommitGroup``: uploads, "processing" statuses and
    finished extractions share transactions (a lone write is committed at once, writes that arrive
    while the store is busy, a merge, go together); a first extraction pass answered while its
    chunk still waits for gleaning is committed at once."""

    def __init__(self, db: Runner) -> None:
        self.group = CommitGroup(db)
        bind = db.dialect.bind
        self.uploads: BatchWriter[NewDocument] = self.group.writer(bind(insert_documents))
        self.starts: BatchWriter[Started] = self.group.writer(bind(start_documents))
        self.replies: BatchWriter[CacheEntry] = self.group.writer(bind(save_replies))
        self.extractions: BatchWriter[ExtractionRecord] = self.group.writer(bind(record_extractions))

    async def run(self) -> None:
        await self.group.run()


class SqlDocuments(SqlAdapter):
    """``DocumentTables`` over either backend (see the module's docstring)."""

    sql: ModuleType                                  # the backend's statements where the engines part
    read_errors: tuple[type[BaseException], ...]     # the engine's errors a read may raise

    def __init__(self, db: Runner) -> None:
        super().__init__(db)
        self.metadata_version = 0   # moves on with every metadata edit (filters' caches key on it)

    async def get(self, document_id: str) -> dict[str, Any] | None:
        return await self.read(get_document, document_id)

    async def get_many(self, document_ids: list[str]) -> dict[str, dict[str, Any]]:
        return await self.read(get_documents, document_ids)

    async def with_text(self, document_id: str) -> tuple[dict[str, Any] | None, str]:
        return await self.read(document_with_text, document_id)

    async def named(self, name: str) -> list[dict[str, Any]]:
        return await self.read(documents_named, name)

    async def and_versions(self, document_id: str, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        return await self.read(document_and_versions, document_id, name)

    async def page(self, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
        return await self.read(lambda sql: list_documents(sql, status=status, search=search, sort=sort,
                                                          descending=descending, limit=limit, offset=offset,
                                                          ids=ids))

    async def unfinished_ids(self) -> list[str]:
        return await self.read(unfinished_ids)

    def new_row(self, record: dict[str, Any]) -> dict[str, Any]:
        return new_document_row(record)

    async def insert(self, record: dict[str, Any], text: str) -> None:
        await self.write(insert_documents, [(record, text)])

    async def delete_unprocessed(self, document_id: str) -> None:
        await self.write(delete_unprocessed, document_id)

    async def set_metadata(self, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return await self.write(set_metadata, document_id, metadata)
        finally:
            self.metadata_version += 1

    async def searchable_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        return await self.read(searchable_metadata)

    async def metadata_of(self, ids: list[str] | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        return await self.read(metadata_of, ids)

    async def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        await self.write(self.sql.set_status, document_id, status, error)

    async def start(self, items: list[Started]) -> None:
        await self.write(start_documents, items)

    def extracted_ids_sync(self, chunk_ids: list[str]) -> set[str]:
        return self.read_sync(extracted_ids, chunk_ids)

    async def stored_chunk_ids(self, chunk_ids: list[str]) -> set[str]:
        return await self.read(stored_chunk_ids, chunk_ids)

    async def orphaned_chunks(self, document_id: str, keep: list[str]) -> list[str]:
        return await self.read(orphaned_chunks, document_id, keep)

    async def counts(self, document_id: str) -> dict[str, int]:
        return await self.read(document_counts, document_id)

    async def entity_counts(self, document_ids: list[str]) -> dict[str, int]:
        return await self.read(entity_counts, document_ids)

    async def chunks(self, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        return await self.read(document_chunks, document_id, limit, offset)

    async def deletion_effects(self, document_id: str) -> dict[str, int]:
        return await self.read(deletion_effects, document_id)

    def ingest_writes(self) -> SqlIngestWrites:
        return SqlIngestWrites(self.db)

    def health_sync(self) -> StorageHealth:
        raise NotImplementedError

    def condition(self) -> StorageCondition:
        raise NotImplementedError
