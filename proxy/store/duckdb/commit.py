"""Committing a changeset to DuckDB in one transaction (``sql_commit.write_changes``: new rows go in
as Arrow tables), and the reads that heal the vector indexes from the tables (keys, embeddings,
counts)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from proxy.store.changes import Changeset, ChunkRow, IndexDelta
from proxy.store.duckdb.connection import DIALECT, Con, bump_generation, get_meta, set_meta
from proxy.store.sql_commit import ROW_COLUMNS, CommitStorage
from proxy.store.sql_commit import write_changes as write_changes_with
from proxy.store.sql_dialect import Sql
from proxy.store.sql_documents import status_counts


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
    by_status = status_counts(Sql(con, DIALECT))

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


def vectors_column(vectors: list[np.ndarray]) -> pa.Array:
    """Embeddings as an Arrow list column: DuckDB takes it in bulk (row-wise inserts of 768 floats
    cost milliseconds each)."""
    if not vectors:
        return pa.array([], type=pa.list_(pa.float32()))
    flat = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in vectors])
    offsets = np.cumsum([0, *[len(v) for v in vectors]], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


def _insert(con: Con, table: str, frame: pa.Table, verb: str = "INSERT") -> None:
    """``frame``'s rows into ``table`` (registering an Arrow table: one statement for them all)."""
    con.register("new_rows", frame)
    try:
        con.execute(f"{verb} INTO {table} SELECT * FROM new_rows")
    finally:
        con.unregister("new_rows")


class DuckDBCommits:
    """``CommitStorage``: DuckDB stores new rows through Arrow tables."""

    dialect = DIALECT

    def insert_chunks(self, con: Con, chunks: list[ChunkRow]) -> None:
        _insert(con, "chunks", pa.table({
            "id": [c.id for c in chunks], "key": [c.key for c in chunks], "content": [c.content for c in chunks],
            "tokens": [c.tokens for c in chunks], "embedding": vectors_column([c.embedding for c in chunks])}))

    def link_chunks(self, con: Con, links: list[tuple[str, str, int]]) -> None:
        _insert(con, "document_chunks", pa.table({"document_id": [link[0] for link in links],
                                                  "chunk_id": [link[1] for link in links],
                                                  "ord": [link[2] for link in links]}), "INSERT OR REPLACE")

    def store_rows(self, con: Con, table: str, id_column: str, rows: list[Any],
                   old: dict[str, tuple[int, datetime]], rekeyed: list[Any], stamp: datetime) -> None:
        """Every row deleted and inserted again, in bulk (its creation time kept)."""
        ids = [getattr(r, id_column) for r in rows]
        created = [old[i][1] if i in old else stamp for i in ids]
        columns = ROW_COLUMNS[table]
        data = {name: [getattr(r, name) for r in rows] for name in columns if name != "embedding"}
        data["embedding"] = vectors_column([r.embedding for r in rows])
        con.execute(f"DELETE FROM {table} WHERE {id_column} IN (SELECT unnest(?::VARCHAR[]))", [ids])
        _insert(con, table, pa.table({**{n: data[n] for n in columns}, "created_at": created,
                                      "updated_at": [stamp] * len(rows)}))

    def update_documents(self, con: Con, updates: list[Any], stamp: datetime) -> None:
        """Every document's new status in one statement (a merge commits up to a batch of them)."""
        if not updates:
            return
        con.register("document_updates", pa.table({
            "id": [u.id for u in updates], "status": [u.status for u in updates],
            "error": pa.array([u.error for u in updates], pa.string()),
            "chunks_total": pa.array([u.chunks_total for u in updates], pa.int32()),
            "chunks_done": pa.array([u.chunks_done for u in updates], pa.int32())}))
        try:
            con.execute("""UPDATE documents SET status = u.status, error = u.error, updated_at = $stamp,
                           chunks_total = coalesce(u.chunks_total, documents.chunks_total),
                           chunks_done = coalesce(u.chunks_done, documents.chunks_done),
                           processed_at = CASE WHEN u.status = 'processed' THEN $stamp ELSE documents.processed_at END
                           FROM document_updates u WHERE documents.id = u.id""", {"stamp": stamp})
        finally:
            con.unregister("document_updates")

    def first_dimension(self, con: Con, dim: int) -> None:
        set_meta(con, "embed_dim", dim)

    def committed(self, con: Con, changes: Changeset, deltas: dict[str, IndexDelta], stamp: datetime) -> int:
        return bump_generation(con)


COMMITS: CommitStorage = DuckDBCommits()


def write_changes(con: Con, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
    """One transaction through the single writer (``sql_commit.write_changes``)."""
    return write_changes_with(con, changes, COMMITS)
