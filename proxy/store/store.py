"""The knowledge store: the three engines kept in step.

A change is committed to DuckDB first (one transaction), then applied to the vector indexes and
the graph under ``memory_lock``, which readers of the in-memory engines also take. At start-up
the indexes are checked against the tables and healed; the graph is loaded from the tables.
"""

from __future__ import annotations

import gc
import logging
import threading
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio.to_thread
import numpy as np
import pyarrow as pa

from proxy.store.changes import Changeset, split_pair
from proxy.store.graph_igraph import EntityGraph
from proxy.store.rows_memory import EntityMeta, MemoryRows, RelationMeta, graph_edges
from proxy.store.duckdb.tables import DuckDBTables
from proxy.store.duckdb.connection import Con, Database, bump_generation, get_meta, next_keys, set_meta
from proxy.store.vectors_usearch import VectorIndex

log = logging.getLogger("graphgate.store")
T = TypeVar("T")

INDEXED_TABLES = ("chunks", "entities", "relations")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class IndexDelta:
    added_keys: list[int] = field(default_factory=list)
    added_vectors: list[np.ndarray] = field(default_factory=list)
    removed_keys: list[int] = field(default_factory=list)
    linked_chunks: dict[str, list[str]] = field(default_factory=dict)  # chunks of removed documents


class KnowledgeStore:
    def __init__(self, data_dir: Path, dtype: str = "i8", memory_limit: str = "1GB") -> None:
        self.data_dir = data_dir
        self.memory_limit = memory_limit
        self.db: Database
        self.tables: DuckDBTables
        self.indexes = {name: VectorIndex(data_dir / f"{name}.usearch", dtype) for name in INDEXED_TABLES}
        self.graph = EntityGraph()
        self.rows = MemoryRows()
        self.memory_lock = threading.RLock()
        self.apply_lock = anyio.Lock()  # one commit at a time from tables to indexes and graph
        self.generation = 0
        self.saved_generation = 0

    # --- opening, healing, saving ---

    @classmethod
    async def open(cls, data_dir: Path, dtype: str = "i8", memory_limit: str = "1GB") -> KnowledgeStore:
        store = cls(data_dir, dtype, memory_limit)
        await anyio.to_thread.run_sync(store._open_sync)
        return store

    def _open_sync(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db = Database(self.data_dir / "graphgate.duckdb", self.memory_limit)
        self.tables = DuckDBTables(self.db)
        self.generation = int(self.db.read_sync(get_meta, "generation", "0") or 0)
        ndim = self.embedding_dim()
        for name, index in self.indexes.items():
            loaded = index.load(ndim)
            healed = self._heal_index(name, index, trust=loaded and index.generation == self.generation)
            if healed:
                log.info("vector index %s was out of step with the tables and has been repaired", name)
        self._load_memory()
        # From here on DuckDB serves small reads and writes, many a second: with worker threads,
        # each statement wakes them, and the context switches cost 12 % of the CPU per ingested
        # chunk (bench/ingest.py). The big scans above (start-up at 1M chunks) keep them.
        self.db.set_threads(1)
        self.db.on_reopen = self._reopened
        self.saved_generation = self.generation
        if any(index.generation != self.generation for index in self.indexes.values()):
            try:
                self._save_sync()
            except OSError as exc:  # e.g. a full disk: serve from the healed indexes in memory
                log.warning("repaired vector indexes not saved (%s); they are repaired again at the next "
                            "start", exc)

    def _reopened(self) -> None:
        """The database was reopened after DuckDB invalidated it: a commit that raised (its
        automatic checkpoint failed) may be in the log after all; then the indexes, rows and graph
        are made to match the tables again (in the reopening thread, writers held)."""
        generation = int(self.db.read_sync(get_meta, "generation", "0") or 0)
        if generation == self.generation:
            return
        log.warning("a commit that reported a failure was in the store's log after all: rebuilding the "
                    "in-memory indexes and graph from the tables")
        with self.memory_lock:
            for name, index in self.indexes.items():
                self._heal_index(name, index, trust=False)
            self._load_memory()
            self.generation = generation

    def embedding_dim(self) -> int | None:
        raw = self.db.read_sync(get_meta, "embed_dim")
        return int(raw) if raw else None

    def _heal_index(self, table: str, index: VectorIndex, *, trust: bool) -> bool:
        """Make the index hold exactly the table's keys; True if anything had to change.

        An untrusted index (its file missing, unreadable, of another format, or of another
        generation) counts as repaired only when the table has rows: an empty table has nothing to
        be out of step with. A fresh store has no embedding dimension and so no index files at all,
        every time it starts until its first vector; that is not a repair.
        """
        db_keys = self.db.read_sync(lambda c: c.execute(f"SELECT key FROM {table}").fetchnumpy()["key"])
        db_keys = np.asarray(db_keys, dtype=np.uint64)
        if trust and len(index) == len(db_keys):
            return False
        ix_keys = index.keys()
        missing = np.setdiff1d(db_keys, ix_keys, assume_unique=True)
        extra = np.setdiff1d(ix_keys, db_keys, assume_unique=True)
        index.remove(extra)
        if len(missing):
            self.db.read_sync(lambda con: [index.add(k, v) for k, v in _embeddings_for(con, table, missing)])
        index.generation = -1
        return bool(len(missing) or len(extra)) or (not trust and len(db_keys) > 0)

    def _load_memory(self) -> None:
        """The in-memory rows from the tables, then the graph from the rows (sharing their strings)."""
        rows = MemoryRows()
        # millions of new objects, none of them garbage: the collector would rescan them again and
        # again while they load (a third of the time at 1M chunks)
        gc.disable()
        try:
            self.db.read_sync(rows.load)
            self.graph.load(list(rows.entity_keys), *self.db.read_sync(graph_edges))
        finally:
            gc.enable()
        self.rows = rows

    def _save_sync(self) -> None:
        with self.memory_lock:
            generation = self.generation
            for index in self.indexes.values():
                if index.generation != generation:
                    index.save(generation)
            self.saved_generation = generation

    async def save(self) -> None:
        if self.saved_generation != self.generation:
            await anyio.to_thread.run_sync(self._save_sync)

    async def close(self) -> None:
        try:
            await self.save()
        except OSError as exc:  # the tables are the truth: the next start heals the indexes from them
            log.warning("vector indexes not saved at shutdown (%s); they are rebuilt at the next start", exc)
        self.db.close()

    # --- committing ---

    async def apply(self, changes: Changeset) -> int:
        """Commit ``changes`` to the tables, then to the indexes and the graph. The store's writer is
        free again once the tables are committed (uploads need not wait for index inserts); changes
        reach the indexes in the order they reached the tables."""
        async with self.apply_lock:
            with anyio.CancelScope(shield=True):
                async with self.db.write_lock:
                    deltas, generation = await anyio.to_thread.run_sync(self.db.write_sync, _write_changes,
                                                                        changes)
                return await anyio.to_thread.run_sync(self._apply_memory, changes, deltas, generation)

    def _apply_memory(self, changes: Changeset, deltas: dict[str, IndexDelta], generation: int) -> int:
        touched_chunks = [c for d in changes.documents_removed for c in deltas["chunks"].linked_chunks.get(d, [])]
        touched_chunks += [chunk for _, chunk, _ in changes.links_added]
        with self.memory_lock:
            self._apply_rows(changes)
            self.db.read_sync(self.rows.load_documents, list(dict.fromkeys(touched_chunks)))
            for name, delta in deltas.items():
                index = self.indexes[name]
                index.remove(np.asarray(delta.removed_keys, dtype=np.uint64))
                if delta.added_keys:
                    index.add(np.asarray(delta.added_keys, dtype=np.uint64), np.vstack(delta.added_vectors))
                index.generation = -1
            self._apply_graph(changes)
            self.generation = generation
        return generation

    def _apply_rows(self, changes: Changeset) -> None:
        rows = self.rows
        for chunk_id in changes.chunks_removed:
            rows.drop_chunk(chunk_id)
        for chunk in changes.chunks_added:
            if chunk.key:
                rows.put_chunk(chunk.id, chunk.key)
        for name_key in changes.entities_removed:
            rows.drop_entity(name_key)
        for e in changes.entities_upserted:
            rows.put_entity(EntityMeta(e.key, e.name_key, e.name, e.type, rows.sources(e.source_ids)))
        for pair in changes.relations_removed:
            rows.drop_relation(pair)
        for r in changes.relations_upserted:
            rows.put_relation(RelationMeta(r.key, r.pair_key, tuple(r.keywords), r.weight, rows.sources(r.source_ids)))

    def _apply_graph(self, changes: Changeset) -> None:
        self.graph.add_entities(row.name_key for row in changes.entities_upserted)
        self.graph.set_edges((row.source, row.target, row.weight) for row in changes.relations_upserted)
        self.graph.remove_edges(split_pair(key) for key in changes.relations_removed)
        self.graph.remove_entities(changes.entities_removed)

    # --- reading the in-memory engines (always in a worker thread, never on the event loop) ---

    def read_memory_sync(self, read: Callable[[MemoryRows, EntityGraph], T]) -> T:
        """``read(rows, graph)`` over a consistent state of the rows and the graph. Blocking: call it
        from a worker thread (``read_memory`` does); ``read`` must not keep or change what it sees."""
        with self.memory_lock:
            return read(self.rows, self.graph)

    async def read_memory(self, read: Callable[[MemoryRows, EntityGraph], T]) -> T:
        return await anyio.to_thread.run_sync(self.read_memory_sync, read)

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(vector key, similarity) of the ``count`` nearest rows of ``table``. Blocking."""
        with self.memory_lock:
            return self.indexes[table].search(vector, count)

    def search_many_sync(self, table: str, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        with self.memory_lock:
            return self.indexes[table].search_many(vectors, count)

    def vectors_sync(self, table: str, keys: list[int]) -> np.ndarray:
        """The stored vectors of ``keys`` (empty when the index has none). Blocking."""
        with self.memory_lock:
            index = self.indexes[table]
            if index.ndim is None or not keys:
                return np.empty((0, 0), dtype=np.float32)
            return index.vectors(np.asarray(keys, dtype=np.uint64))

    # --- rebuilding (graphgate reindex) ---

    def rebuild_sync(self) -> dict[str, int]:
        """Rebuild every index, the rows and the graph from the tables and save the indexes; the
        sizes of the indexes. Blocking."""
        ndim = self.embedding_dim()
        with self.memory_lock:
            for table, index in self.indexes.items():
                index.reset(ndim)
                self._heal_index(table, index, trust=False)
            self._load_memory()
            self.generation = int(self.db.read_sync(get_meta, "generation", "0") or 0)
        self.saved_generation = -1
        self._save_sync()
        return {table: len(index) for table, index in self.indexes.items()}

    async def rebuild(self) -> dict[str, int]:
        return await anyio.to_thread.run_sync(self.rebuild_sync)

    def stats_sync(self) -> dict[str, Any]:
        counts = self.db.read_sync(_table_counts)
        with self.memory_lock:
            counts["index_sizes"] = {name: len(index) for name, index in self.indexes.items()}
            counts["graph"] = {"vertices": self.graph.vertex_count, "edges": self.graph.edge_count}
        counts["generation"] = self.generation
        counts["bytes_on_disk"] = sum(p.stat().st_size for p in self.data_dir.glob("*") if p.is_file())
        return counts

    async def stats(self) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self.stats_sync)


def _embeddings_for(con: Con, table: str, keys: np.ndarray, batch: int = 50_000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, vectors) of the wanted rows in batches, through Arrow (never as Python floats)."""
    for start in range(0, len(keys), batch):
        wanted = [int(k) for k in keys[start:start + batch]]
        with warnings.catch_warnings():  # "an extra copy of the rows": fine on this repair path
            warnings.simplefilter("ignore", UserWarning)
            result = con.execute(f"SELECT key, embedding FROM {table} WHERE key IN (SELECT unnest(?::BIGINT[]))",
                                 [wanted]).to_arrow_table()
        if result.num_rows == 0:
            continue
        column = result.column("embedding").combine_chunks()
        vectors = np.asarray(column.values, dtype=np.float32).reshape(len(column), -1)
        yield np.asarray(result.column("key").to_numpy(), dtype=np.uint64), vectors


def _table_counts(con: Con) -> dict[str, Any]:
    by_status = dict(con.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "documents": {s: by_status.get(s, 0) for s in ("pending", "processing", "processed", "failed")},
        "chunks": one("SELECT count(*) FROM chunks"),
        "entities": one("SELECT count(*) FROM entities"),
        "relations": one("SELECT count(*) FROM relations"),
        "extractions": one("SELECT count(*) FROM extractions"),
        "cache_entries": one("SELECT count(*) FROM llm_cache"),
    }


def _write_changes(con: Con, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
    deltas = {name: IndexDelta() for name in INDEXED_TABLES}
    stamp = now()
    _remove_documents(con, changes, deltas["chunks"])
    _add_chunks(con, changes, deltas["chunks"])
    _delete_rows(con, "entities", "name_key", changes.entities_removed, deltas["entities"])
    _upsert_rows(con, "entities", "name_key", changes.entities_upserted, deltas["entities"], stamp)
    _delete_rows(con, "relations", "pair_key", changes.relations_removed, deltas["relations"])
    _upsert_rows(con, "relations", "pair_key", changes.relations_upserted, deltas["relations"], stamp)
    _update_documents(con, changes.documents, stamp)
    for statement in changes.also:
        statement(con)
    dim = next((len(v) for d in deltas.values() for v in d.added_vectors), None)
    if dim and get_meta(con, "embed_dim") is None:
        set_meta(con, "embed_dim", dim)
    return deltas, bump_generation(con)


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
        for document_id, chunk_id in con.execute(
                "SELECT document_id, chunk_id FROM document_chunks WHERE document_id = ANY(?::VARCHAR[])", [ids]).fetchall():
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
        links = pa.table({"document_id": [l[0] for l in changes.links_added],
                          "chunk_id": [l[1] for l in changes.links_added], "ord": [l[2] for l in changes.links_added]})
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
