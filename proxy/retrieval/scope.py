"""A retrieval restricted by a metadata filter (``proxy/core/metadata.py``): chunks of the matching
documents only, and the entities and relations with at least one source among those chunks.

``Scope`` is what a filter lets through, computed once per set of matching documents and store
generation (``ScopeCache``). ``ScopedStore`` is the store as a scoped retrieval sees it: its
searches over-fetch and keep in-scope rows (or, for a small scope, compare the question with the
scope's own vectors exactly), name links and graph walks stay inside the scope; every other read
passes through. The retriever also drops out-of-scope finds after each channel (``restrict``), so
a channel that reads around the view still cannot leak. An entity or relation sourced by matching
and other documents alike is described by what the matching documents' chunks said of it (their
extraction results), not by its merged description, when those chunks name it as stored.

Community summaries are written from the whole graph, so a filtered retrieval uses none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from proxy.extraction.results import ExtractionResult, name_key
from proxy.retrieval.found import Found
from proxy.retrieval.select import cosine_to
from proxy.store.changes import pair_key

if TYPE_CHECKING:
    from proxy.store.protocols.graph import Graph
    from proxy.store.store import EntityMeta, KnowledgeStore, MemoryRows, RelationMeta

T = TypeVar("T")
EXACT_MAX = 4096      # a scope this small is searched exactly: its vectors read and compared (~1 ms)
OVERFETCH = 4         # else the index is asked for this many times more, again until enough are in scope
OUT_OF_SCOPE_WEIGHT = 1e-6   # an edge outside the scope carries (almost) none of a graph walk
CACHED_SCOPES = 16


@dataclass(frozen=True)
class Scope:
    documents: frozenset[str]                    # the matching documents' names
    chunks: frozenset[str]                       # their chunk ids
    entities: frozenset[str]                     # name keys of the entities they source
    relations: frozenset[str]                    # pair keys of the relations they source
    vector_keys: dict[str, frozenset[int]]       # table -> the in-scope rows' vector keys

    @property
    def empty(self) -> bool:
        return not self.chunks

    def restrict(self, found: Found) -> Found:
        """``found`` without anything outside the scope; the kept items' sources narrowed to it."""
        entities = [e for e in found.entities if e.key in self.entities]
        relations = [r for r in found.relations if r.pair in self.relations]
        for entity in entities:
            entity.source_ids = [c for c in entity.source_ids if c in self.chunks]
        for relation in relations:
            relation.source_ids = [c for c in relation.source_ids if c in self.chunks]
        return Found(entities, relations, [c for c in found.chunks if c.id in self.chunks], [])


def compute_scope(store: KnowledgeStore, documents: frozenset[str]) -> Scope:
    """The scope of the documents named ``documents``, from the store's in-memory rows: copied under
    the store's lock (a few ms at 100k entities; the records are never changed in place), then
    scanned outside it, so that commits do not wait for the scan. Blocking."""
    def copy(rows: MemoryRows, graph: Graph) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, int],
                                                     list[EntityMeta], list[RelationMeta]]:
        return (list(rows.chunk_documents.items()), dict(rows.chunk_keys), list(rows.entities.values()),
                list(rows.relations.values()))
    cited, chunk_keys, entity_rows, relation_rows = store.read_memory_sync(copy)
    chunks = frozenset(c for c, names in cited if not documents.isdisjoint(names))
    entity_rows = [m for m in entity_rows if not chunks.isdisjoint(m.source_ids)]
    relation_rows = [m for m in relation_rows if not chunks.isdisjoint(m.source_ids)]
    return Scope(documents, chunks, frozenset(m.name_key for m in entity_rows),
                 frozenset(m.pair for m in relation_rows),
                 {"chunks": frozenset(chunk_keys[c] for c in chunks if c in chunk_keys),
                  "entities": frozenset(m.key for m in entity_rows),
                  "relations": frozenset(m.key for m in relation_rows),
                  "communities": frozenset()})


class ScopeCache:
    """Scopes by (store generation, matching documents): a commit makes them stale, and the same
    filter asked again (a conversation, a dashboard) costs a set lookup."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[int, frozenset[str]], Scope] = {}
        self._lock = threading.Lock()   # worker threads share it; held for the dict's changes only

    def get(self, store: KnowledgeStore, documents: frozenset[str]) -> Scope:
        """Blocking: call it from a worker thread."""
        key = (store.generation, documents)
        scope = self._scopes.get(key)
        if scope is None:
            scope = compute_scope(store, documents)
            with self._lock:
                self._scopes[key] = scope
                while len(self._scopes) > CACHED_SCOPES:
                    self._scopes.pop(next(iter(self._scopes)))
        return scope


class _ScopedGraph:
    """The graph with only the scope's edges (what ``edges_touching`` walks); other reads pass."""

    def __init__(self, graph: Graph, scope: Scope) -> None:
        self._graph, self._scope = graph, scope

    def neighbourhood(self, key: str, depth: int = 1) -> list[str]:
        if key not in self._scope.entities:
            return []
        if depth != 1:
            return [k for k in self._graph.neighbourhood(key, depth) if k in self._scope.entities]
        relations = self._scope.relations
        return [k for k in self._graph.neighbourhood(key, 1) if k == key or pair_key(key, k) in relations]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


class ScopedStore:
    """The store's reads as a scoped retrieval makes them (see the module's docstring)."""

    def __init__(self, store: KnowledgeStore, scope: Scope) -> None:
        self._store, self._scope = store, scope

    def as_store(self) -> KnowledgeStore:
        """This view where a channel expects the store: it offers the same reads."""
        return cast("KnowledgeStore", self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        allowed = self._scope.vector_keys.get(table, frozenset())
        if not allowed or count <= 0:
            return []
        if len(allowed) <= EXACT_MAX:
            keys = list(allowed)
            vectors = self._store.vectors_sync(table, keys)
            if vectors.shape[0] == len(keys):
                similarity = cosine_to(np.asarray(vector, dtype=np.float32).reshape(-1), vectors)
                best = np.argsort(-similarity, kind="stable")[:count]
                return [(keys[i], float(similarity[i])) for i in best]
        return self._overfetch(lambda n: self._store.search_sync(table, vector, n), allowed, count,
                               self._store.vector_count(table))

    def keyword_search_sync(self, table: str, query: str, count: int) -> list[tuple[int, float]]:
        allowed = self._scope.vector_keys.get(table, frozenset())
        if not allowed or count <= 0:
            return []
        return self._overfetch(lambda n: self._store.keyword_search_sync(table, query, n), allowed, count,
                               self._store.keyword_count(table))

    @staticmethod
    def _overfetch(search: Callable[[int], list[tuple[int, float]]], allowed: frozenset[int], count: int,
                   total: int) -> list[tuple[int, float]]:
        asked = count * OVERFETCH
        while True:
            matches = search(asked)
            kept = [(k, s) for k, s in matches if k in allowed]
            if len(kept) >= count or asked >= total or len(matches) < asked:
                return kept[:count]
            asked *= OVERFETCH

    def link_sync(self, text: str) -> list[tuple[str, float]]:
        return [(k, s) for k, s in self._store.link_sync(text) if k in self._scope.entities]

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        scope = self._scope
        return self._store.read_memory_sync(lambda rows, graph: read(rows, cast("Graph", _ScopedGraph(graph, scope))))

    def expand_sync(self, seeds: dict[str, float], weigh: Callable[[list[tuple[str, str]]], list[float]],
                    *, hops: int, cap: int, damping: float, limit: int,
                    edge_cap: int | None = None) -> list[tuple[str, float]]:
        scope = self._scope
        inside = {k: w for k, w in seeds.items() if k in scope.entities}
        if not inside:
            return []

        def scoped_weights(pairs: list[tuple[str, str]]) -> list[float]:
            return [w if pair_key(*p) in scope.relations else OUT_OF_SCOPE_WEIGHT
                    for p, w in zip(pairs, weigh(pairs), strict=True)]

        ranked = self._store.expand_sync(inside, scoped_weights, hops=hops, cap=cap, damping=damping,
                                         limit=cap, edge_cap=edge_cap)
        return [(k, s) for k, s in ranked if k in scope.entities][:limit]

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        found = self._store.descriptions_sync(table, wanted)
        partial = self._partly_in_scope(table, [key for key, _ in wanted])
        if partial:
            said = self._store.extractions_sync(sorted({c for _, ids in partial.values() for c in ids}))
            for key, (ident, ids) in partial.items():
                text = scoped_description(table, ident, [said[c] for c in ids if c in said])
                if text:
                    found[key] = text
        return found

    def _partly_in_scope(self, table: str, keys: list[int]) -> dict[int, tuple[str, list[str]]]:
        """Vector key -> (name or pair key, in-scope sources) of the rows some of whose sources are out."""
        chunks = self._scope.chunks

        def read(rows: MemoryRows, graph: Graph) -> dict[int, tuple[str, list[str]]]:
            out = {}
            for key in keys:
                meta = rows.entities.get(key) if table == "entities" else rows.relations.get(key)
                if meta is None:
                    continue
                inside = [c for c in meta.source_ids if c in chunks]
                if inside and len(inside) < len(meta.source_ids):
                    out[key] = (meta.name_key if table == "entities" else meta.pair, inside)   # type: ignore[union-attr]
            return out
        return self._store.read_memory_sync(read)


def scoped_description(table: str, ident: str, results: list[str]) -> str:
    """What these chunks' extractions say of the entity (name key) or relation (pair key), each
    distinct description once, in source order; "" when none names it as stored (a merge renamed it)."""
    said: dict[str, None] = {}
    for raw in results:
        extracted = ExtractionResult.from_json(raw)
        if table == "entities":
            texts = [e.description for e in extracted.entities if name_key(e.name) == ident]
        else:
            texts = [r.description for r in extracted.relations
                     if pair_key(name_key(r.source), name_key(r.target)) == ident]
        said.update((t.strip(), None) for t in texts if t.strip())
    return " ".join(said)
