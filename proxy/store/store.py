"""The knowledge store: the three engines kept in step.

A change is committed to the tables first (one transaction), then applied to the in-memory rows
and the graph, then to the vector indexes. Each of the two in-memory sides has its own lock, held
only in worker threads, never on the event loop: readers of rows and graph (console pages, entity
lookups) do not wait for a commit's slow HNSW inserts, and vector searches do not wait for graph
edits. At start-up the indexes are checked against the tables and healed; the graph is loaded
from the tables.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import numpy as np

from proxy.core.errors import StoreUnavailable
from proxy.core.names import name_words
from proxy.store.backends import EMBEDDED, Backend
from proxy.store.changes import Changeset, IndexDelta, split_pair
from proxy.store.duckdb.commit import INDEXED_TABLES, now
from proxy.store.name_index import NameIndex
from proxy.store.protocols.graph import Graph
from proxy.store.protocols.tables import Tables
from proxy.store.protocols.vectors import Vectors
from proxy.store.rows_memory import EntityMeta, MemoryRows, RelationMeta

__all__ = ["INDEXED_TABLES", "KnowledgeStore", "now"]

log = logging.getLogger("graphgate.store")
T = TypeVar("T")


class KnowledgeStore:
    def __init__(self, data_dir: Path, dtype: str = "i8", memory_limit: str = "1GB",
                 backend: Backend = EMBEDDED) -> None:
        self.data_dir = data_dir
        self.memory_limit = memory_limit
        self.backend = backend
        self.tables: Tables
        self._indexes = {name: backend.new_vectors(data_dir / f"{name}.usearch", dtype) for name in INDEXED_TABLES}
        self._graph = backend.new_graph()
        self._rows = MemoryRows()
        # entity names and aliases, for linking: built on first use (seconds at 1M entities, and
        # linking is off by default), then kept in step with every commit
        self._names: NameIndex | None = None
        self._memory_lock = threading.RLock()   # rows and graph
        self._vectors_lock = threading.RLock()  # the vector indexes
        self.apply_lock = anyio.Lock()  # one commit at a time from tables to indexes and graph
        self.generation = 0
        self.saved_generation = 0

    # --- opening, healing, saving ---

    @classmethod
    async def open(cls, data_dir: Path, dtype: str = "i8", memory_limit: str = "1GB",
                   backend: Backend = EMBEDDED) -> KnowledgeStore:
        """The store, opened, migrated and healed; StoreUnavailable when its tables cannot be opened
        (a read-only or full disk, another process holding them)."""
        store = cls(data_dir, dtype, memory_limit, backend)
        refusals: tuple[type[BaseException], ...] = (*backend.open_errors, OSError)
        try:
            await anyio.to_thread.run_sync(store._open_sync)
        except refusals as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return store

    def _open_sync(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tables = self.backend.open_tables(self.data_dir, self.memory_limit)
        self.generation = int(self.tables.meta_sync("generation", "0") or 0)
        ndim = self.embedding_dim()
        for name, index in self._indexes.items():
            loaded = index.load(ndim)
            healed = self._heal_index(name, index, trust=loaded and index.generation == self.generation)
            if healed:
                log.info("vector index %s was out of step with the tables and has been repaired", name)
        self._load_memory()
        self.tables.serve_small_statements(on_reopen=self._reopened)
        self.saved_generation = self.generation
        if any(index.generation != self.generation for index in self._indexes.values()):
            try:
                self._save_sync()
            except OSError as exc:  # e.g. a full disk: serve from the healed indexes in memory
                log.warning("repaired vector indexes not saved (%s); they are repaired again at the next "
                            "start", exc)

    def _reopened(self) -> None:
        """The tables were reopened after their engine gave up on them: a commit that raised (its
        automatic checkpoint failed) may be in the log after all; then the indexes, rows and graph
        are made to match the tables again (in the reopening thread, writers held)."""
        generation = int(self.tables.meta_sync("generation", "0") or 0)
        if generation == self.generation:
            return
        log.warning("a commit that reported a failure was in the store's log after all: rebuilding the "
                    "in-memory indexes and graph from the tables")
        with self._memory_lock, self._vectors_lock:
            for name, index in self._indexes.items():
                self._heal_index(name, index, trust=False)
            self._load_memory()
            self.generation = generation

    def embedding_dim(self) -> int | None:
        raw = self.tables.meta_sync("embed_dim")
        return int(raw) if raw else None

    def _heal_index(self, table: str, index: Vectors, *, trust: bool) -> bool:
        """Make the index hold exactly the table's keys; True if anything had to change.

        An untrusted index (its file missing, unreadable, of another format, or of another
        generation) counts as repaired only when the table has rows: an empty table has nothing to
        be out of step with. A fresh store has no embedding dimension and so no index files at all,
        every time it starts until its first vector; that is not a repair.
        """
        db_keys = self.tables.keys_sync(table)
        if trust and len(index) == len(db_keys):
            return False
        ix_keys = index.keys()
        missing = np.setdiff1d(db_keys, ix_keys, assume_unique=True)
        extra = np.setdiff1d(ix_keys, db_keys, assume_unique=True)
        index.remove(extra)
        if len(missing):
            self.tables.each_embedding_sync(table, missing, index.add)
        index.generation = -1
        return bool(len(missing) or len(extra)) or (not trust and len(db_keys) > 0)

    def _load_memory(self) -> None:
        """The in-memory rows from the tables, then the graph from the rows (sharing their strings)."""
        rows = MemoryRows()
        # millions of new objects, none of them garbage: the collector would rescan them again and
        # again while they load (a third of the time at 1M chunks)
        gc.disable()
        try:
            self.tables.load_rows_sync(rows)
            self._graph.load(list(rows.entity_keys), *self.tables.graph_edges_sync())
        finally:
            gc.enable()
        self._rows, self._names = rows, None

    def _save_sync(self) -> None:
        with self._vectors_lock:
            generation = self.generation
            for index in self._indexes.values():
                if index.generation != generation:
                    index.save(generation)
            self.saved_generation = generation

    async def save(self) -> None:
        if self.saved_generation != self.generation:
            await anyio.to_thread.run_sync(self._save_sync)

    async def checkpoint(self) -> None:
        """Let the tables fold their log into their files at a quiet moment."""
        await self.tables.checkpoint()

    async def close(self) -> None:
        try:
            await self.save()
        except OSError as exc:  # the tables are the truth: the next start heals the indexes from them
            log.warning("vector indexes not saved at shutdown (%s); they are rebuilt at the next start", exc)
        self.tables.close()

    # --- committing ---

    async def apply(self, changes: Changeset) -> int:
        """Commit ``changes`` to the tables, then to the rows, graph and indexes. The store's writer
        is free again once the tables are committed (uploads need not wait for index inserts);
        changes reach the indexes in the order they reached the tables."""
        async with self.apply_lock:
            with anyio.CancelScope(shield=True):
                deltas, generation = await self.tables.commit(changes)
                applied = await anyio.to_thread.run_sync(self._apply_memory, changes, deltas, generation)
        return applied

    def _apply_memory(self, changes: Changeset, deltas: dict[str, IndexDelta], generation: int) -> int:
        touched_chunks = [c for d in changes.documents_removed for c in deltas["chunks"].linked_chunks.get(d, [])]
        touched_chunks += [chunk for _, chunk, _ in changes.links_added]
        with self._memory_lock:
            self._apply_rows(changes)
            self._apply_names(changes)
            self.tables.load_chunk_documents_sync(self._rows, list(dict.fromkeys(touched_chunks)))
            self._apply_graph(changes)
        with self._vectors_lock:
            for name, delta in deltas.items():
                index = self._indexes[name]
                index.remove(np.asarray(delta.removed_keys, dtype=np.uint64))
                if delta.added_keys:
                    index.add(np.asarray(delta.added_keys, dtype=np.uint64), np.vstack(delta.added_vectors))
                index.generation = -1
            self.generation = generation
        return generation

    def _apply_rows(self, changes: Changeset) -> None:
        rows = self._rows
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

    def _apply_names(self, changes: Changeset) -> None:
        """The name index follows the entities and the aliases, in the order the tables took them."""
        names, curation = self._names, changes.curation
        if names is None:  # not built yet: it is built from the rows and tables when first used
            return
        for name_key in changes.entities_removed:
            names.drop_entity(name_key)
        for e in changes.entities_upserted:
            names.put_entity(e.name_key)
        for alias in curation.aliases_dropped:
            names.drop_alias(alias)
        for alias, target in curation.aliases.items():
            names.put_alias(alias, target)
        names.drop_aliases_into(curation.aliases_into_dropped)

    def _apply_graph(self, changes: Changeset) -> None:
        self._graph.add_entities(row.name_key for row in changes.entities_upserted)
        self._graph.set_edges((row.source, row.target, row.weight) for row in changes.relations_upserted)
        self._graph.remove_edges(split_pair(key) for key in changes.relations_removed)
        self._graph.remove_entities(changes.entities_removed)

    # --- reading the in-memory engines (always in a worker thread, never on the event loop) ---

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        """``read(rows, graph)`` over a consistent state of the rows and the graph. Blocking: call it
        from a worker thread (``read_memory`` does); ``read`` must not keep or change what it sees."""
        with self._memory_lock:
            return read(self._rows, self._graph)

    async def read_memory(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        return await anyio.to_thread.run_sync(self.read_memory_sync, read)

    def link_sync(self, text: str) -> list[tuple[str, float]]:
        """(entity key, confidence) of the entities ``text`` names (their names or merge aliases,
        any case, punctuation or legal suffix, one typo in a long name), best first. Blocking."""
        words = name_words(text)
        with self._memory_lock:
            if self._names is None:
                self._names = NameIndex.build(self._rows.entity_keys, self.tables.graph_rows.aliases_sync())
            entity_keys = self._rows.entity_keys
            return [(key, score) for key, score in self._names.link(words) if key in entity_keys]

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(vector key, similarity) of the ``count`` nearest rows of ``table``. Blocking."""
        with self._vectors_lock:
            return self._indexes[table].search(vector, count)

    def search_many_sync(self, table: str, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        with self._vectors_lock:
            return self._indexes[table].search_many(vectors, count)

    def vectors_sync(self, table: str, keys: list[int]) -> np.ndarray:
        """The stored vectors of ``keys`` (empty when the index has none). Blocking."""
        with self._vectors_lock:
            index = self._indexes[table]
            if index.ndim is None or not keys:
                return np.empty((0, 0), dtype=np.float32)
            return index.vectors(np.asarray(keys, dtype=np.uint64))

    def vector_keys_sync(self, table: str) -> np.ndarray:
        """Every key ``table``'s index holds (consistency checks). Blocking."""
        with self._vectors_lock:
            return self._indexes[table].keys()

    def vector_count(self, table: str) -> int:
        """How many vectors ``table``'s index holds: one size read, cheap enough for the event loop."""
        return len(self._indexes[table])

    # --- multi-hop expansion (personalised PageRank from seed entities) ---

    def expand_sync(self, seeds: dict[str, float], weigh: Callable[[list[tuple[str, str]]], list[float]],
                    *, hops: int, cap: int, damping: float, limit: int) -> list[tuple[str, float]]:
        """(entity key, score) of the ``limit`` entities a personalised PageRank from ``seeds``
        (key -> restart weight) ranks highest, best first, seeds included. It runs over the seeds'
        neighbourhood up to ``hops`` away (at most ``cap`` entities, so its time does not grow
        with the graph), each edge weighted by ``weigh(pairs)`` (called outside the lock: it may
        read the store). Blocking."""
        with self._memory_lock:
            edges = self._graph.neighbourhood_edges(list(seeds), hops, cap)
        scores = self._graph.personalized_pagerank(seeds, edges, weigh(edges) if edges else [], damping)
        return sorted(scores.items(), key=lambda item: -item[1])[:limit]

    # --- rebuilding (graphgate reindex) ---

    def rebuild_sync(self) -> dict[str, int]:
        """Rebuild every index, the rows and the graph from the tables and save the indexes; the
        sizes of the indexes. Blocking."""
        ndim = self.embedding_dim()
        with self._memory_lock, self._vectors_lock:
            for table, index in self._indexes.items():
                index.reset(ndim)
                self._heal_index(table, index, trust=False)
            self._load_memory()
            self.generation = int(self.tables.meta_sync("generation", "0") or 0)
        self.saved_generation = -1
        self._save_sync()
        return {table: len(index) for table, index in self._indexes.items()}

    async def rebuild(self) -> dict[str, int]:
        return await anyio.to_thread.run_sync(self.rebuild_sync)

    def stats_sync(self) -> dict[str, Any]:
        counts = self.tables.counts_sync()
        with self._vectors_lock:
            counts["index_sizes"] = {name: len(index) for name, index in self._indexes.items()}
        with self._memory_lock:
            counts["graph"] = {"vertices": self._graph.vertex_count, "edges": self._graph.edge_count}
        counts["generation"] = self.generation
        counts["bytes_on_disk"] = sum(p.stat().st_size for p in self.data_dir.glob("*") if p.is_file())
        return counts

    async def stats(self) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self.stats_sync)
