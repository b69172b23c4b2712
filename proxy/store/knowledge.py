"""The knowledge store: the three engines kept in step.

A change is committed to DuckDB first (one transaction), then applied to the vector indexes and
the graph under ``memory_lock``, which readers of the in-memory engines also take. At start-up
the indexes are checked against the tables and healed; the graph is loaded from the tables.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import numpy as np

from .changes import Changeset, split_pair
from .graph_igraph import EntityGraph
from .tables_duckdb import Con, Database, bump_generation, get_meta, next_keys, set_meta
from .vectors_usearch import VectorIndex

log = logging.getLogger("graphgate.store")

INDEXED_TABLES = ("chunks", "entities", "relations")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class IndexDelta:
    added_keys: list[int] = field(default_factory=list)
    added_vectors: list[np.ndarray] = field(default_factory=list)
    removed_keys: list[int] = field(default_factory=list)


class KnowledgeStore:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.db: Database
        self.indexes = {name: VectorIndex(data_dir / f"{name}.usearch") for name in INDEXED_TABLES}
        self.graph = EntityGraph()
        self.memory_lock = threading.RLock()
        self.generation = 0
        self.saved_generation = 0

    # --- opening, healing, saving ---

    @classmethod
    async def open(cls, data_dir: Path) -> KnowledgeStore:
        store = cls(data_dir)
        await anyio.to_thread.run_sync(store._open_sync)
        return store

    def _open_sync(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db = Database(self.data_dir / "graphgate.duckdb")
        self.generation = int(self.db.read_sync(get_meta, "generation", "0") or 0)
        ndim = self.embedding_dim()
        for name, index in self.indexes.items():
            loaded = index.load(ndim)
            healed = self._heal_index(name, index, trust=loaded and index.generation == self.generation)
            if healed:
                log.info("vector index %s was out of step with the tables and has been repaired", name)
        self._load_graph()
        self.saved_generation = self.generation
        if any(index.generation != self.generation for index in self.indexes.values()):
            self._save_sync()

    def embedding_dim(self) -> int | None:
        raw = self.db.read_sync(get_meta, "embed_dim")
        return int(raw) if raw else None

    def _heal_index(self, table: str, index: VectorIndex, *, trust: bool) -> bool:
        """Make the index hold exactly the table's keys; True if anything had to change."""
        db_keys = self.db.read_sync(lambda c: c.execute(f"SELECT key FROM {table}").fetchnumpy()["key"])
        db_keys = np.asarray(db_keys, dtype=np.uint64)
        if trust and len(index) == len(db_keys):
            return False
        ix_keys = index.keys()
        missing = np.setdiff1d(db_keys, ix_keys, assume_unique=True)
        extra = np.setdiff1d(ix_keys, db_keys, assume_unique=True)
        index.remove(extra)
        if len(missing):
            keys, vectors = self.db.read_sync(_embeddings_for, table, missing)
            index.add(keys, vectors)
        index.generation = -1
        return bool(len(missing) or len(extra)) or not trust

    def _load_graph(self) -> None:
        entities = self.db.read_sync(lambda c: [r[0] for r in c.execute("SELECT name_key FROM entities").fetchall()])
        edges = self.db.read_sync(
            lambda c: c.execute("SELECT source, target, weight FROM relations").fetchall())
        self.graph.load(entities, [(s, t, float(w)) for s, t, w in edges])

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
        await self.save()
        self.db.close()

    # --- committing ---

    async def apply(self, changes: Changeset) -> int:
        """Commit ``changes`` to the tables, then to the indexes and the graph."""
        async with self.db.write_lock:
            with anyio.CancelScope(shield=True):
                return await anyio.to_thread.run_sync(self._apply_sync, changes)

    def _apply_sync(self, changes: Changeset) -> int:
        deltas, generation = self.db.write_sync(_write_changes, changes)
        with self.memory_lock:
            for name, delta in deltas.items():
                index = self.indexes[name]
                index.remove(np.asarray(delta.removed_keys, dtype=np.uint64))
                if delta.added_keys:
                    index.add(np.asarray(delta.added_keys, dtype=np.uint64), np.vstack(delta.added_vectors))
                index.generation = -1
            self._apply_graph(changes)
            self.generation = generation
        return generation

    def _apply_graph(self, changes: Changeset) -> None:
        self.graph.add_entities(row.name_key for row in changes.entities_upserted)
        self.graph.set_edges((row.source, row.target, row.weight) for row in changes.relations_upserted)
        self.graph.remove_edges(split_pair(key) for key in changes.relations_removed)
        self.graph.remove_entities(changes.entities_removed)

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


def _embeddings_for(con: Con, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    con.execute("CREATE OR REPLACE TEMP TABLE wanted_keys (key BIGINT)")
    con.executemany("INSERT INTO wanted_keys VALUES (?)", [[int(k)] for k in keys])
    rows = con.execute(f"SELECT t.key, t.embedding FROM {table} t JOIN wanted_keys w USING (key)").fetchall()
    con.execute("DROP TABLE wanted_keys")
    found = np.asarray([r[0] for r in rows], dtype=np.uint64)
    vectors = np.asarray([r[1] for r in rows], dtype=np.float32) if rows else np.empty((0, 0), np.float32)
    return found, vectors


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
    _write_entities(con, changes, deltas["entities"], stamp)
    _write_relations(con, changes, deltas["relations"], stamp)
    if changes.document is not None:
        _update_document(con, changes.document, stamp)
    for statement in changes.also:
        statement(con)
    dim = next((len(v) for d in deltas.values() for v in d.added_vectors), None)
    if dim and get_meta(con, "embed_dim") is None:
        set_meta(con, "embed_dim", dim)
    return deltas, bump_generation(con)


def _remove_documents(con: Con, changes: Changeset, delta: IndexDelta) -> None:
    for document_id in changes.documents_removed:
        con.execute("DELETE FROM document_chunks WHERE document_id = ?", [document_id])
        con.execute("DELETE FROM documents WHERE id = ?", [document_id])
    for chunk_id in changes.chunks_removed:
        row = con.execute("DELETE FROM chunks WHERE id = ? RETURNING key", [chunk_id]).fetchone()
        if row:
            delta.removed_keys.append(row[0])


def _add_chunks(con: Con, changes: Changeset, delta: IndexDelta) -> None:
    existing = {r[0] for r in con.execute(
        "SELECT id FROM chunks WHERE id IN (SELECT unnest(?::VARCHAR[]))", [[c.id for c in changes.chunks_added]]
    ).fetchall()} if changes.chunks_added else set()
    new = [c for c in {c.id: c for c in changes.chunks_added}.values() if c.id not in existing]
    for chunk, key in zip(new, next_keys(con, len(new)), strict=True):
        chunk.key = key
        con.execute("INSERT INTO chunks VALUES (?, ?, ?, ?, ?)",
                    [chunk.id, key, chunk.content, chunk.tokens, chunk.embedding.tolist()])
        delta.added_keys.append(key)
        delta.added_vectors.append(chunk.embedding)
    for document_id, chunk_id, order in changes.links_added:
        con.execute("INSERT OR REPLACE INTO document_chunks VALUES (?, ?, ?)", [document_id, chunk_id, order])


def _write_entities(con: Con, changes: Changeset, delta: IndexDelta, stamp: datetime) -> None:
    for name_key in changes.entities_removed:
        row = con.execute("DELETE FROM entities WHERE name_key = ? RETURNING key", [name_key]).fetchone()
        if row:
            delta.removed_keys.append(row[0])
    for entity in changes.entities_upserted:
        old = con.execute("SELECT key, created_at FROM entities WHERE name_key = ?", [entity.name_key]).fetchone()
        created = old[1] if old else stamp
        if entity.key == 0 or (old and old[0] != entity.key):
            entity.key = next_keys(con, 1)[0]
            if old:
                delta.removed_keys.append(old[0])
            delta.added_keys.append(entity.key)
            delta.added_vectors.append(entity.embedding)
        con.execute("INSERT OR REPLACE INTO entities VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [entity.name_key, entity.name, entity.key, entity.type, entity.description,
                     entity.source_ids, entity.embed_hash, entity.embedding.tolist(), created, stamp])


def _write_relations(con: Con, changes: Changeset, delta: IndexDelta, stamp: datetime) -> None:
    for pair in changes.relations_removed:
        row = con.execute("DELETE FROM relations WHERE pair_key = ? RETURNING key", [pair]).fetchone()
        if row:
            delta.removed_keys.append(row[0])
    for relation in changes.relations_upserted:
        old = con.execute("SELECT key, created_at FROM relations WHERE pair_key = ?", [relation.pair_key]).fetchone()
        created = old[1] if old else stamp
        if relation.key == 0 or (old and old[0] != relation.key):
            relation.key = next_keys(con, 1)[0]
            if old:
                delta.removed_keys.append(old[0])
            delta.added_keys.append(relation.key)
            delta.added_vectors.append(relation.embedding)
        con.execute("INSERT OR REPLACE INTO relations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [relation.pair_key, relation.source, relation.target, relation.key, relation.keywords,
                     relation.description, relation.weight, relation.source_ids, relation.embed_hash,
                     relation.embedding.tolist(), created, stamp])


def _update_document(con: Con, update: Any, stamp: datetime) -> None:
    con.execute("""UPDATE documents SET status = ?, error = ?, updated_at = ?,
                   chunks_total = coalesce(?, chunks_total), chunks_done = coalesce(?, chunks_done),
                   processed_at = CASE WHEN ? = 'processed' THEN ? ELSE processed_at END
                   WHERE id = ?""",
                [update.status, update.error, stamp, update.chunks_total, update.chunks_done,
                 update.status, stamp, update.id])
