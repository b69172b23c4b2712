"""Committing a changeset to the tables in one transaction, and the reads that heal the vector
indexes from the tables (keys, embeddings, counts)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from proxy.store.changes import Changeset, IndexDelta
from proxy.store.duckdb.connection import DIALECT, Con, bump_generation, get_meta, next_keys, set_meta
from proxy.store.sql_cache import write_cache
from proxy.store.sql_dialect import Sql
from proxy.store.sql_graph_rows import write_curation
from proxy.store.vector_models import guard_vectors

INDEXED_TABLES = ("chunks", "entities", "relations")   # the knowledge: vector and keyword indexes
# every table with a vector index: the knowledge, and the community summaries derived from it
VECTOR_TABLES = (*INDEXED_TABLES, "communities")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def table_keys(con: Con, table: str) -> np.ndarray:
    """Every vector key of ``table`` (healing an index compares them with the index's)."""
    return np.asarray(con.execute(f"SELECT key FROM {table}").fetchnumpy()["key"], dtype=np.uint64)


def embeddings_for(con: Con, table: str, keys: np.ndarray,
                   batch: int = 50_000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, vectors) of the wanted rows in batches, through Arrow (never as Python floats)."""
    for start in range(0, len(keys), batch):
        wanted = [int(k) for k in keys[start:start + batch]]
        with warnings.catch_warnings():  # "an extra copy of the rows": fine on this repair path
            warnings.simplefilter("ignore", UserWarning)
            result = con.execute(f"SELECT key, embedding FROM {table} WHERE key IN (SELECT unnest(?::BIGINT[]))",
                                 [wanted]).to_arrow_table()
        if result is None:  # only a statement without a result set gives none
            raise RuntimeError(f"reading {table} embeddings gave no result set")
        if result.num_rows == 0:
            continue
        column = result.column("embedding").combine_chunks()
        vectors = np.asarray(column.values, dtype=np.float32).reshape(len(column), -1)
        yield np.asarray(result.column("key").to_numpy(), dtype=np.uint64), vectors


def table_counts(con: Con) -> dict[str, Any]:
    generation = int(get_meta(con, "generation", "0") or 0)
    by_status = dict(con.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())

    def one(sql: str) -> Any:
        row = con.execute(sql).fetchone()
        if row is None:  # an aggregate always gives a row
            raise RuntimeError(f"no row from {sql}")
        return row[0]

    counts = {
        "documents": {s: by_status.get(s, 0) for s in ("pending", "processing", "processed", "failed")},
        "chunks": one("SELECT count(*) FROM chunks"),
        "entities": one("SELECT count(*) FROM entities"),
        "relations": one("SELECT count(*) FROM relations"),
        "extractions": one("SELECT count(*) FROM extractions"),
        "cache_entries": one("SELECT count(*) FROM llm_cache"),
        "communities": one("SELECT count(*) FROM communities"),
    }
    # the commit these counts are from (a commit's rows and its generation land in one transaction;
    # the statements above are not one, so a commit between them gives -1: read again)
    counts["table_generation"] = generation if int(get_meta(con, "generation", "0") or 0) == generation else -1
    return counts


def write_changes(con: Con, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
    deltas = {name: IndexDelta() for name in VECTOR_TABLES}
    stamp = now()
    _remove_documents(con, changes, deltas["chunks"])
    _add_chunks(con, changes, deltas["chunks"])
    _delete_rows(con, "entities", "name_key", changes.entities_removed, deltas["entities"])
    _upsert_rows(con, "entities", "name_key", changes.entities_upserted, deltas["entities"], stamp)
    _delete_rows(con, "relations", "pair_key", changes.relations_removed, deltas["relations"])
    _upsert_rows(con, "relations", "pair_key", changes.relations_upserted, deltas["relations"], stamp)
    _delete_rows(con, "communities", "id", changes.communities_removed, deltas["communities"])
    _upsert_rows(con, "communities", "id", changes.communities_upserted, deltas["communities"], stamp)
    _update_documents(con, changes.documents, stamp)
    write_curation(Sql(con, DIALECT), changes.curation, stamp)  # aliases and hand edits (sql_graph_rows.py)
    write_cache(Sql(con, DIALECT), changes.cache_entries, [])
    guard_vectors(changes, deltas, lambda key: get_meta(con, key), lambda key, value: set_meta(con, key, value),
                  lambda table, keys: _other_rows(con, table, keys))
    for statement in changes.also:
        statement(con)
    dim = next((len(v) for d in deltas.values() for v in d.added_vectors), None)
    if dim and get_meta(con, "embed_dim") is None:
        set_meta(con, "embed_dim", dim)
    return deltas, bump_generation(con)


def _other_rows(con: Con, table: str, keys: list[int]) -> int:
    """Rows of ``table`` whose vector key is not one of ``keys`` (a commit's own)."""
    row = con.execute(f"SELECT count(*) FROM {table} WHERE key NOT IN (SELECT unnest(?::BIGINT[]))",
                      [keys]).fetchone()
    return int(row[0]) if row else 0


def vectors_column(vectors: list[np.ndarray]) -> pa.Array:
    """Embeddings as an Arrow list column: DuckDB takes it in bulk (row-wise inserts of 768 floats
    cost milliseconds each)."""
    if not vectors:
        return pa.array([], type=pa.list_(pa.float32()))
    flat = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in vectors])
    offsets = np.cumsum([0, *[len(v) for v in vectors]], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


def _remove_documents(con: Con, changes: Changeset, delta: IndexDelta) -> None:
    if changes.documents_removed:
        ids = list(changes.documents_removed)
        linked = con.execute(
            "SELECT document_id, chunk_id FROM document_chunks WHERE document_id = ANY(?::VARCHAR[])", [ids]).fetchall()
        for document_id, chunk_id in linked:
            delta.linked_chunks.setdefault(document_id, []).append(chunk_id)
        con.execute("DELETE FROM document_chunks WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
        con.execute("DELETE FROM documents WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    _delete_rows(con, "chunks", "id", changes.chunks_removed, delta)


def _delete_rows(con: Con, table: str, id_column: str, ids: list[str], delta: IndexDelta) -> None:
    if ids:
        rows = con.execute(f"DELETE FROM {table} WHERE {id_column} IN (SELECT unnest(?::VARCHAR[])) RETURNING key",
                           [list(ids)]).fetchall()
        delta.removed_keys.extend(r[0] for r in rows)


def _add_chunks(con: Con, changes: Changeset, delta: IndexDelta) -> None:
    unique = list({c.id: c for c in changes.chunks_added}.values())
    existing = {r[0] for r in con.execute("SELECT id FROM chunks WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                                          [[c.id for c in unique]]).fetchall()} if unique else set()
    new = [c for c in unique if c.id not in existing]
    for chunk, key in zip(new, next_keys(con, len(new)), strict=True):
        chunk.key = key
        delta.added_keys.append(key)
        delta.added_vectors.append(chunk.embedding)
    if new:
        rows = pa.table({"id": [c.id for c in new], "key": [c.key for c in new], "content": [c.content for c in new],
                         "tokens": [c.tokens for c in new], "embedding": vectors_column([c.embedding for c in new])})
        con.register("new_chunks", rows)
        con.execute("INSERT INTO chunks SELECT * FROM new_chunks")
        con.unregister("new_chunks")
    if changes.links_added:
        links = pa.table({"document_id": [link[0] for link in changes.links_added],
                          "chunk_id": [link[1] for link in changes.links_added],
                          "ord": [link[2] for link in changes.links_added]})
        con.register("new_links", links)
        con.execute("INSERT OR REPLACE INTO document_chunks SELECT * FROM new_links")
        con.unregister("new_links")


def _upsert_rows(con: Con, table: str, id_column: str, rows: list[Any], delta: IndexDelta, stamp: datetime) -> None:
    """Replace rows in bulk; a row whose key is 0 or differs from the stored one gets a new key."""
    if not rows:
        return
    ids = [getattr(r, id_column) for r in rows]
    old = {r[0]: (r[1], r[2]) for r in con.execute(
        f"SELECT {id_column}, key, created_at FROM {table} WHERE {id_column} IN (SELECT unnest(?::VARCHAR[]))",
        [ids]).fetchall()}
    fresh = [r for r in rows if r.key == 0 or (getattr(r, id_column) in old and old[getattr(r, id_column)][0] != r.key)]
    for row, key in zip(fresh, next_keys(con, len(fresh)), strict=True):
        previous = old.get(getattr(row, id_column))
        if previous:
            delta.removed_keys.append(previous[0])
        row.key = key
        delta.added_keys.append(key)
        delta.added_vectors.append(row.embedding)
    created = [old[i][1] if i in old else stamp for i in ids]
    columns = _ROW_COLUMNS[table]
    data = {name: [getattr(r, name) for r in rows] for name in columns if name != "embedding"}
    data["embedding"] = vectors_column([r.embedding for r in rows])
    frame = pa.table({**{n: data[n] for n in columns}, "created_at": created, "updated_at": [stamp] * len(rows)})
    con.execute(f"DELETE FROM {table} WHERE {id_column} IN (SELECT unnest(?::VARCHAR[]))", [ids])
    con.register("new_rows", frame)
    con.execute(f"INSERT INTO {table} SELECT * FROM new_rows")
    con.unregister("new_rows")


_ROW_COLUMNS = {
    "entities": ("name_key", "name", "key", "type", "description", "source_ids", "embed_hash", "embedding"),
    "relations": ("pair_key", "source", "target", "key", "keywords", "description", "weight", "source_ids",
                  "embed_hash", "embedding"),
    "communities": ("id", "key", "title", "summary", "members", "digest", "embedding"),
}


def _update_documents(con: Con, updates: list[Any], stamp: datetime) -> None:
    """Every document's new status in one statement (a merge commits up to a batch of them)."""
    if not updates:
        return
    con.register("document_updates", pa.table({
        "id": [u.id for u in updates], "status": [u.status for u in updates],
        "error": pa.array([u.error for u in updates], pa.string()),
        "chunks_total": pa.array([u.chunks_total for u in updates], pa.int32()),
        "chunks_done": pa.array([u.chunks_done for u in updates], pa.int32())}))
    con.execute("""UPDATE documents SET status = u.status, error = u.error, updated_at = $stamp,
                   chunks_total = coalesce(u.chunks_total, documents.chunks_total),
                   chunks_done = coalesce(u.chunks_done, documents.chunks_done),
                   processed_at = CASE WHEN u.status = 'processed' THEN $stamp ELSE documents.processed_at END
                   FROM document_updates u WHERE documents.id = u.id""", {"stamp": stamp})
    con.unregister("document_updates")
