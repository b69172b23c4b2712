"""The knowledge store: the three engines kept in step.

A change is committed to the tables first (one transaction), then applied to the in-memory rows
and the graph, then to the vector indexes. Each of the two in-memory sides has its own lock, held
only in worker threads, never on the event loop: readers of rows and graph (console pages, entity
lookups) do not wait for a commit's slow HNSW inserts, and vector searches do not wait for graph
edits. At start-up the indexes are checked against the tables and healed; the graph is loaded
from the tables.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
import numpy as np

from proxy.store.backends import EMBEDDED, Backend
from proxy.store.changes import Changeset, IndexDelta, split_pair
from proxy.store.clock import now
from proxy.store.communities_igraph import Community, leiden_communities
from proxy.store.entity_page_reads import EntityPageReads
from proxy.store.incident import Incident, IncidentCache, incident_relations
from proxy.store.keyword_indexes import KeywordIndexes
from proxy.store.memory_reads import GraphScope, MemoryView, NamedReads
from proxy.store.messages import opening_error
from proxy.store.name_linking import NameLinking
from proxy.store.protocols.communities import StoredCommunity
from proxy.store.protocols.graph import Graph
from proxy.store.protocols.tables import SharedTables, Tables
from proxy.store.protocols.vectors import Vectors
from proxy.store.read_cache import TextCache
from proxy.store.replica_following import ReplicaFollowing
from proxy.store.rows_memory import EntityMeta, MemoryRows, RelationMeta
from proxy.store.sql_commit import INDEXED_TABLES
from proxy.store.vector_models import VECTOR_TABLES

__all__ = ["INDEXED_TABLES", "VECTOR_TABLES", "Community", "KnowledgeStore", "now"]

log = logging.getLogger("graphgate.store")
TEXTS_CACHED = 100_000   # descriptions and chunk texts kept per kind (a few hundred MB at most)
T = TypeVar("T")
STATS_PATIENCE = 5.0        # seconds a stats read is made again while commits land between its parts
STATS_RETRY_SECONDS = 0.01


class KnowledgeStore(NamedReads, EntityPageReads):
    """The store; retrieval reads it through its narrow face (``protocols/retrieval.py``), the named
    reads of its rows and graph (``memory_reads.py``) among them; the console's entity pages through
    theirs (``entity_page_reads.py``)."""

    def __init__(self, data_dir: Path, dtype: str = "i8", memory_limit: str = "1GB",
                 backend: Backend = EMBEDDED) -> None:
        self.data_dir = data_dir
        self.memory_limit = memory_limit
        self.backend = backend
        self.tables: Tables
        self.dtype = dtype
        self._indexes: dict[str, Vectors] = {}   # by table, made once the tables are open
        self._graph = backend.new_graph()
        self._rows = MemoryRows()
        self.names = NameLinking(self)   # entity names and aliases, for linking (name_linking.py)
        # the texts retrieval reads per turn, by vector key (``read_cache.py``)
        self._descriptions: dict[str, TextCache[str]] = {"entities": TextCache(TEXTS_CACHED),
                                                         "relations": TextCache(TEXTS_CACHED)}
        self._chunk_texts: TextCache[tuple[str, str, int]] = TextCache(TEXTS_CACHED)
        self.keywords = KeywordIndexes(self, backend, data_dir)   # BM25, built on first use (keyword_indexes.py)
        self._memory_lock = threading.RLock()   # rows and graph
        self._incident = IncidentCache()   # under the memory lock
        self._vectors_lock = threading.RLock()  # the vector indexes
        self.apply_lock = anyio.Lock()  # one commit at a time from tables to indexes and graph
        # the embedding model this process makes vectors with (GRAPHGATE_EMBED_MODEL): a commit's
        # vectors are recorded as its, and refused by a table whose vectors come from another
        # (proxy/store/vector_models.py); None: not checked (a store used without a knowledge service)
        self.embed_model: str | None = None
        self.generation = 0
        self.saved_generation = 0
        self._committed: anyio.Event | None = None   # set by the next commit (``wait_for_commit``)
        self.replicas = ReplicaFollowing(self)   # the other replicas' commits, on a shared store

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
            # the whole error, paths and all, for the operator; the caller is told why, not where
            log.error("the knowledge store at %s cannot be opened: %s: %s", data_dir, type(exc).__name__, exc)
            raise opening_error(exc, data_dir) from exc
        return store

    def _open_sync(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tables = self.backend.open_tables(self.data_dir, self.memory_limit, self.dtype)
        self._indexes = {name: self.backend.new_vectors(self.tables, name, self.data_dir / f"{name}.usearch",
                                                        self.dtype) for name in VECTOR_TABLES}
        self.generation = int(self.tables.meta_sync("generation", "0") or 0)
        ndim = self.embedding_dim()
        for name, index in self._indexes.items():
            loaded = index.load(ndim)
            healed = self._heal_index(name, index, trust=loaded and index.generation == self.generation)
            if healed:
                log.info("vector index %s was out of step with the tables and has been repaired", name)
        self._load_memory()
        if self.backend.shared:   # other replicas commit meanwhile: the rows are of the snapshot they were read in
            self.generation = cast(SharedTables, self.tables).loaded_generation
            for index in self._indexes.values():   # and so are the indexes' sizes
                index.load(ndim)
        self.keywords.open()
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
        if self.keywords.ready:
            self.keywords.build(heal=True, tables=set(self.keywords.ready))

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
        self._rows = rows
        self.names.reset()
        for cache in self._descriptions.values():
            cache.clear()
        self._chunk_texts.clear()

    def _save_sync(self) -> None:
        with self._vectors_lock:
            generation = self.generation
            for index in self._indexes.values():
                if index.generation != generation:
                    index.save(generation)
            self.saved_generation = generation
        self.keywords.save()   # not under the vectors' lock: the keywords' is taken before the rows' lock

    async def save(self) -> None:
        if self.saved_generation != self.generation:
            await anyio.to_thread.run_sync(self._save_sync)

    async def checkpoint(self) -> None:
        """Let the tables fold their log into their files at a quiet moment."""
        await self.tables.checkpoint()

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.keywords.settle_sync)
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
        if changes.embed_model is None:
            changes.embed_model = self.embed_model
        async with self.apply_lock:
            with anyio.CancelScope(shield=True):
                deltas, generation = await self.tables.commit(changes)
                if generation != self.generation + 1 and self.backend.shared:   # other replicas' commits first
                    await anyio.to_thread.run_sync(self.replicas.replay_sync, generation)
                if self.generation >= generation:   # a reload (a gap in the log) already read this commit
                    applied = self.generation
                else:
                    applied = await anyio.to_thread.run_sync(self.apply_memory_sync, changes, deltas, generation)
        self.committed()
        return applied

    def committed(self) -> None:
        """Wake whoever waits for the next commit (``wait_for_commit``)."""
        if self._committed is not None:
            self._committed.set()
            self._committed = None

    async def wait_for_commit(self, seen: int) -> None:
        """Return once a commit moved the generation past ``seen`` (background jobs that follow
        the knowledge base's changes, such as the community summaries)."""
        while self.generation == seen:
            if self._committed is None:
                self._committed = anyio.Event()
            await self._committed.wait()

    def apply_memory_sync(self, changes: Changeset, deltas: dict[str, IndexDelta], generation: int) -> int:
        touched_chunks = [c for d in changes.documents_removed for c in deltas["chunks"].linked_chunks.get(d, [])]
        touched_chunks += [chunk for _, chunk, _ in changes.links_added]
        with self._memory_lock:
            self._apply_rows(changes)
            self.names.apply(changes)
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
        self.keywords.apply(changes, deltas, generation)
        return generation

    def reload_memory_sync(self) -> None:
        """The rows, graph and indexes read again from the tables (a replica fallen behind the log)."""
        with self._memory_lock, self._vectors_lock:
            self._load_memory()
            self.generation = cast(SharedTables, self.tables).loaded_generation
            for index in self._indexes.values():
                index.load(self.embedding_dim())
        if self.keywords.ready:
            self.keywords.build(heal=True, tables=set(self.keywords.ready))

    def _apply_rows(self, changes: Changeset) -> None:
        rows = self._rows
        self._evict_texts(changes)
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

    def _evict_texts(self, changes: Changeset) -> None:
        """The cached texts of what a commit removes or writes (by its old keys and its new ones)."""
        rows = self._rows
        self._chunk_texts.evict(key for chunk_id in changes.chunks_removed
                                if (key := rows.chunk_keys.get(chunk_id)) is not None)
        gone = [rows.entity(name_key) for name_key in [*changes.entities_removed,
                                                      *(e.name_key for e in changes.entities_upserted)]]
        self._descriptions["entities"].evict([m.key for m in gone if m is not None]
                                             + [e.key for e in changes.entities_upserted])
        dropped = [rows.relation(pair) for pair in [*changes.relations_removed,
                                                    *(r.pair_key for r in changes.relations_upserted)]]
        self._descriptions["relations"].evict([m.key for m in dropped if m is not None]
                                              + [r.key for r in changes.relations_upserted])

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        """Descriptions of entities or relations by vector key (with the name or pair key, to find a
        row re-keyed since its key was read), from the cache or one table read. Blocking."""
        cache = self._descriptions[table]
        found, missing = cache.get_many(key for key, _ in wanted)
        if missing:
            absent = set(missing)
            read = self.tables.retrieval_rows.descriptions_sync(table, [w for w in wanted if w[0] in absent])
            cache.put_many({key: text for key, text in read.items() if key in absent})
            found.update(read)
        return found

    def keyword_search_sync(self, table: str, query: str, count: int) -> list[tuple[int, float]]:
        """(vector key, BM25 score) of the ``count`` rows of ``table`` whose text best matches
        ``query``'s words, best first (only rows sharing a word). Blocking."""
        return self.keywords.search_sync(table, query, count)

    def keyword_count(self, table: str) -> int:
        """How many rows ``table``'s keyword index holds (0 until it is first used)."""
        return self.keywords.count(table)

    def link_sync(self, text: str) -> list[tuple[str, float]]:
        """(entity key, confidence) of the entities ``text`` names (``NameLinking.link_sync``). Blocking."""
        return self.names.link_sync(text)

    def extractions_sync(self, chunk_ids: list[str]) -> dict[str, str]:
        """Chunk id -> what extraction found in it (ExtractionResult JSON). Blocking."""
        return self.tables.retrieval_rows.extractions_sync(chunk_ids)

    def aliases_sync(self) -> dict[str, str]:
        """The merge aliases: a merged-away name key -> the key it resolves to. Blocking."""
        return self.tables.graph_rows.aliases_sync()

    def community_rows_sync(self, keys: list[int]) -> dict[int, StoredCommunity]:
        """The community summaries of these vector keys. Blocking."""
        return self.tables.communities.by_keys_sync(keys)

    @property
    def metadata_version(self) -> int:
        """Moves with every edit of a document's metadata (what a filter matches may change)."""
        return self.tables.documents.metadata_version

    async def searchable_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        """The processed documents' (name, metadata), for a metadata filter."""
        return await self.tables.documents.searchable_metadata()

    @property
    def shared(self) -> bool:
        """Whether other replicas share the store (its searches then run on the database server)."""
        return self.backend.shared

    def within(self, scope: GraphScope) -> MemoryView:
        """The named reads over the graph as ``scope`` sees it (a retrieval under a metadata filter)."""
        return MemoryView(self, scope)

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]:
        """id -> (content, tokens) of the chunks with these vector keys, from the cache or one table
        read. Blocking."""
        cached, missing = self._chunk_texts.get_many(keys)
        if missing:
            read = self.tables.retrieval_rows.chunk_texts_sync(missing)
            # under the lock a commit evicts under: a chunk deleted meanwhile is neither cached nor returned
            with self._memory_lock:
                keyed = {key: (chunk_id, *read[chunk_id]) for chunk_id in read
                         if (key := self._rows.chunk_keys.get(chunk_id)) is not None}
                self._chunk_texts.put_many(keyed)
            cached.update(keyed)
        return {chunk_id: (content, tokens) for chunk_id, content, tokens in cached.values()}

    def _apply_graph(self, changes: Changeset) -> None:
        self._graph.add_entities(row.name_key for row in changes.entities_upserted)
        self._graph.set_edges((row.source, row.target, row.weight) for row in changes.relations_upserted)
        self._graph.remove_edges(split_pair(key) for key in changes.relations_removed)
        self._graph.remove_entities(changes.entities_removed)

    # --- reading the in-memory engines (always in a worker thread, never on the event loop) ---

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        """``read(rows, graph)`` over a consistent state of the rows and the graph. Blocking: call it
        from a worker thread; ``read`` must not keep or change what it sees."""
        with self._memory_lock:
            return read(self._rows, self._graph)

    def incident_sync(self, keys: list[str]) -> list[Incident]:
        """The relations touching ``keys`` (each once, in the order of ``keys``), as listed once per
        commit (``IncidentCache``). Blocking."""
        with self._memory_lock:
            return incident_relations([self._incident.read(self._rows, self._graph, self.generation, key)
                                       for key in keys])

    def _vectors_held(self) -> contextlib.AbstractContextManager[Any]:
        """The vector indexes' lock, for an in-memory index; none for the tables' own (a shared store:
        PostgreSQL keeps its indexes consistent, and a turn's channel searches run together)."""
        return contextlib.nullcontext() if self.backend.shared else self._vectors_lock

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(vector key, similarity) of the ``count`` nearest rows of ``table``. Blocking."""
        with self._vectors_held():
            return self._indexes[table].search(vector, count)

    def search_many_sync(self, table: str, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        with self._vectors_held():
            return self._indexes[table].search_many(vectors, count)

    def vectors_sync(self, table: str, keys: list[int]) -> np.ndarray:
        """The stored vectors of ``keys`` (empty when the index has none). Blocking."""
        with self._vectors_held():
            index = self._indexes[table]
            if index.ndim is None or not keys:
                return np.empty((0, 0), dtype=np.float32)
            return index.vectors(np.asarray(keys, dtype=np.uint64))

    def similarities_sync(self, table: str, keys: list[int], vector: np.ndarray) -> np.ndarray:
        """The cosine of ``vector`` to each stored vector of ``keys`` (empty when any is missing). Blocking."""
        with self._vectors_held():
            index = self._indexes[table]
            if index.ndim is None or not keys:
                return np.empty(0, dtype=np.float32)
            return index.similarities(np.asarray(keys, dtype=np.uint64), vector)

    def vector_keys_sync(self, table: str) -> np.ndarray:
        """Every key ``table``'s index holds (consistency checks). Blocking."""
        with self._vectors_lock:
            return self._indexes[table].keys()

    def vector_count(self, table: str) -> int:
        """How many vectors ``table``'s index holds: one size read, cheap enough for the event loop."""
        return len(self._indexes[table])

    # --- multi-hop expansion (personalised PageRank from seed entities) ---

    def neighbourhood_sync(self, seeds: dict[str, float], *, hops: int, cap: int,
                           edge_cap: int | None = None) -> list[tuple[str, str]]:
        """The edges of the seeds' neighbourhood up to ``hops`` away, at most ``cap`` entities and
        ``edge_cap`` edges (``Graph.neighbourhood_edges``): a graph walk's, so its time does not grow
        with the graph. Blocking."""
        with self._memory_lock:
            return self._graph.neighbourhood_edges(list(seeds), hops, cap, edge_cap)

    def pagerank_sync(self, seeds: dict[str, float], edges: list[tuple[str, str]], weights: list[float], *,
                      damping: float, limit: int) -> list[tuple[str, float]]:
        """(entity key, score) of the ``limit`` entities a personalised PageRank from ``seeds`` over
        the weighted ``edges`` ranks highest, best first (it reads only its arguments)."""
        scores = self._graph.personalized_pagerank(seeds, edges, weights, damping)
        return sorted(scores.items(), key=lambda item: -item[1])[:limit]

    # --- communities (the summaries' partition) ---

    def communities_sync(self, *, min_size: int, max_size: int, previous: list[list[str]]) -> list[Community]:
        """The graph's Leiden communities of at least ``min_size`` members (a larger one than
        ``max_size`` split again), largest first, starting from the ``previous`` ones. The graph is
        copied under the lock (60 ms at a million entities); it is read and partitioned after the
        lock is released (40 s at a million). Blocking."""
        with self._memory_lock:
            graph = self._graph.copy()
        names, ends, weights = graph.snapshot()
        return leiden_communities(names, ends, weights, min_size=min_size, max_size=max_size, previous=previous)

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
            # a shared store's rows are of the snapshot they were read in (other replicas commit meanwhile)
            self.generation = cast(SharedTables, self.tables).loaded_generation if self.backend.shared else int(
                self.tables.meta_sync("generation", "0") or 0)
        if self.keywords.ready:
            self.keywords.build(heal=False, tables=set(self.keywords.ready))
        self.saved_generation = -1
        self._save_sync()
        return {table: len(index) for table, index in self._indexes.items()}

    async def rebuild(self) -> dict[str, int]:
        return await anyio.to_thread.run_sync(self.rebuild_sync)

    def stats_sync(self) -> dict[str, Any]:
        """The tables' counts, the index sizes and the graph's, all at one generation: a commit
        reaches the tables before the rows, graph and indexes, so a read that straddles one (the
        tables already a commit ahead) is made again, for up to STATS_PATIENCE seconds of
        back-to-back commits (then the last read is given). Blocking."""
        deadline = time.monotonic() + STATS_PATIENCE
        while True:
            seen = self.generation
            counts = self.tables.counts_sync()
            with self._vectors_lock:
                counts["index_sizes"] = {name: len(self._indexes[name]) for name in INDEXED_TABLES}
                indexed_communities = len(self._indexes["communities"])
            with self._memory_lock:
                counts["graph"] = {"vertices": self._graph.vertex_count, "edges": self._graph.edge_count}
            if counts.pop("table_generation") == seen == self.generation or time.monotonic() > deadline:
                break
            time.sleep(STATS_RETRY_SECONDS)
        counts["communities"] = {"count": counts["communities"], "indexed": indexed_communities}
        counts["generation"] = self.generation
        counts["bytes_on_disk"] = sum(p.stat().st_size for p in self.data_dir.glob("*") if p.is_file())
        return counts

    async def stats(self) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self.stats_sync)
