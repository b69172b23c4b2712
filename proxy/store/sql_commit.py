"""Committing a changeset to the tables in one transaction, over either backend. The order of its
writes, the vector keys it gives new and re-embedded rows and the deltas the store's indexes follow
are written once, in the SQL both engines speak (proxy/store/sql_dialect.py); a backend
(``CommitStorage``) stores the new rows its engine's fastest way and ends the commit (its generation,
and PostgreSQL's change log)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from proxy.store.changes import Changeset, ChunkRow, IndexDelta
from proxy.store.clock import now
from proxy.store.sql_cache import write_cache
from proxy.store.sql_dialect import Dialect, Sql
from proxy.store.sql_graph_rows import write_curation
from proxy.store.sql_meta import get_meta, set_meta
from proxy.store.vector_models import VECTOR_TABLES, guard_vectors

INDEXED_TABLES = ("chunks", "entities", "relations")   # the knowledge: vector and keyword indexes
# the rows of each graph table, in their stored order (the embedding last but for the stamps)
ROW_COLUMNS = {
    "entities": ("name_key", "name", "key", "type", "description", "source_ids", "embed_hash", "embedding"),
    "relations": ("pair_key", "source", "target", "key", "keywords", "description", "weight", "source_ids",
                  "embed_hash", "embedding"),
    "communities": ("id", "key", "title", "summary", "members", "digest", "embedding"),
}


class CommitStorage(Protocol):
    """What a backend does its own way within a commit (``duckdb/commit.py``, ``postgres/commit.py``)."""

    dialect: Dialect

    def insert_chunks(self, con: Any, chunks: list[ChunkRow]) -> None: ...

    def link_chunks(self, con: Any, links: list[tuple[str, str, int]]) -> None:
        """(document id, chunk id, order) links; a document's order taken again points elsewhere."""

    def store_rows(self, con: Any, table: str, id_column: str, rows: list[Any],
                   old: dict[str, tuple[int, datetime]], rekeyed: list[Any], stamp: datetime) -> None:
        """Replace ``rows`` (``old``: the stored ones' keys and creation times; ``rekeyed``: those
        given a new key, so a new vector)."""

    def update_documents(self, con: Any, updates: list[Any], stamp: datetime) -> None: ...

    def first_dimension(self, con: Any, dim: int) -> None:
        """The first vectors ever committed have this dimension."""

    def committed(self, con: Any, changes: Changeset, deltas: dict[str, IndexDelta], stamp: datetime) -> int:
        """The commit's new generation (and whatever else ends it)."""


def write_changes(con: Any, changes: Changeset, storage: CommitStorage) -> tuple[dict[str, IndexDelta], int]:
    """The changeset in the caller's transaction: the vector keys added and removed per indexed
    table, and the new generation."""
    sql = Sql(con, storage.dialect)
    deltas = {name: IndexDelta() for name in VECTOR_TABLES}
    stamp = now()
    _remove_documents(sql, changes, deltas["chunks"])
    _add_chunks(sql, changes, deltas["chunks"], storage)
    graph_rows: list[tuple[str, str, list[str], list[Any]]] = [
        ("entities", "name_key", changes.entities_removed, changes.entities_upserted),
        ("relations", "pair_key", changes.relations_removed, changes.relations_upserted),
        ("communities", "id", changes.communities_removed, changes.communities_upserted)]
    for table, id_column, removed, upserted in graph_rows:
        _delete_rows(sql, table, id_column, removed, deltas[table])
        _upsert_rows(sql, table, id_column, upserted, deltas[table], stamp, storage)
    storage.update_documents(con, changes.documents, stamp)
    write_curation(sql, changes.curation, stamp)   # aliases and hand edits
    write_cache(sql, changes.cache_entries, [])
    guard_vectors(changes, deltas, lambda key: get_meta(sql, key), lambda key, value: set_meta(sql, key, value),
                  lambda table, keys: _other_rows(sql, table, keys))
    for statement in changes.also:
        statement(con)
    dim = next((len(v) for d in deltas.values() for v in d.added_vectors), None)
    if dim and get_meta(sql, "embed_dim") is None:
        storage.first_dimension(con, dim)
    return deltas, storage.committed(con, changes, deltas, stamp)


def next_keys(sql: Sql, count: int) -> list[int]:
    """Vector keys from the store's sequence (unique across PostgreSQL's replicas too)."""
    if count <= 0:
        return []
    return [row[0] for row in sql.execute("SELECT nextval('vector_keys') FROM generate_series(1, ?)",
                                          [count]).fetchall()]


def _other_rows(sql: Sql, table: str, keys: list[int]) -> int:
    """Rows of ``table`` whose vector key is not one of ``keys`` (a commit's own)."""
    return int(sql.one(f"SELECT count(*) FROM {table} WHERE NOT {sql.among('key', 'bigint')}", [keys]))


def _remove_documents(sql: Sql, changes: Changeset, delta: IndexDelta) -> None:
    if changes.documents_removed:
        ids = list(changes.documents_removed)
        linked = sql.execute("SELECT document_id, chunk_id FROM document_chunks "
                             f"WHERE {sql.among('document_id', 'text')}", [ids]).fetchall()
        for document_id, chunk_id in linked:
            delta.linked_chunks.setdefault(document_id, []).append(chunk_id)
        sql.execute(f"DELETE FROM document_chunks WHERE {sql.among('document_id', 'text')}", [ids])
        sql.execute(f"DELETE FROM documents WHERE {sql.among('id', 'text')}", [ids])
    _delete_rows(sql, "chunks", "id", changes.chunks_removed, delta)


def _delete_rows(sql: Sql, table: str, id_column: str, ids: list[str], delta: IndexDelta) -> None:
    if ids:
        rows = sql.execute(f"DELETE FROM {table} WHERE {sql.among(id_column, 'text')} RETURNING key",
                           [list(ids)]).fetchall()
        delta.removed_keys.extend(r[0] for r in rows)


def _add_chunks(sql: Sql, changes: Changeset, delta: IndexDelta, storage: CommitStorage) -> None:
    unique = list({c.id: c for c in changes.chunks_added}.values())
    existing = {r[0] for r in sql.execute(f"SELECT id FROM chunks WHERE {sql.among('id', 'text')}",
                                          [[c.id for c in unique]]).fetchall()} if unique else set()
    new = [c for c in unique if c.id not in existing]
    for chunk, key in zip(new, next_keys(sql, len(new)), strict=True):
        chunk.key = key
        delta.added_keys.append(key)
        delta.added_vectors.append(chunk.embedding)
    if new:
        storage.insert_chunks(sql.con, new)
    if changes.links_added:
        storage.link_chunks(sql.con, changes.links_added)


def _upsert_rows(sql: Sql, table: str, id_column: str, rows: list[Any], delta: IndexDelta, stamp: datetime,
                 storage: CommitStorage) -> None:
    """Replace rows; a row whose key is 0 or differs from the stored one gets a new key."""
    if not rows:
        return
    ids = [getattr(r, id_column) for r in rows]
    old = {r[0]: (r[1], r[2]) for r in sql.execute(
        f"SELECT {id_column}, key, created_at FROM {table} WHERE {sql.among(id_column, 'text')}", [ids]).fetchall()}
    rekeyed = [r for r in rows
               if r.key == 0 or (getattr(r, id_column) in old and old[getattr(r, id_column)][0] != r.key)]
    for row, key in zip(rekeyed, next_keys(sql, len(rekeyed)), strict=True):
        previous = old.get(getattr(row, id_column))
        if previous:
            delta.removed_keys.append(previous[0])
        row.key = key
        delta.added_keys.append(key)
        delta.added_vectors.append(row.embedding)
    storage.store_rows(sql.con, table, id_column, rows, old, rekeyed, stamp)
