"""The store as a retrieval under a metadata filter sees it (``proxy/retrieval/scope.py``).

Searches over-fetch and keep in-scope rows (a small scope is compared with the question exactly,
its own vectors read); name links, graph walks and degrees stay inside the scope; every other read
passes through.

An entity or relation that documents on both sides of the filter mention has one merged
description, keyword list and weight. Under a filter it is described only by what the matching
documents' chunks said of it: their stored extraction results, names resolved through the merge
aliases as the merge itself resolves them. When none of those chunks names it (a hand edit renamed
it, say), it gets no description rather than the merged one: a filter fails closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from proxy.extraction.results import ExtractionResult
from proxy.merging.rules import ChunkIndex, index_result
from proxy.retrieval.found import FoundRelation
from proxy.retrieval.scope import Scope
from proxy.store.changes import pair_key
from proxy.store.incident import Incident, incident_of, incident_relations

if TYPE_CHECKING:
    from proxy.store.protocols.graph import Graph
    from proxy.store.store import KnowledgeStore, MemoryRows

T = TypeVar("T")
EXACT_MAX = 4096      # a scope this small is searched exactly: its vectors read and compared (~1 ms)
OVERFETCH = 4         # else the index is asked for this many times more, again until enough are in scope


class _ScopedGraph:
    """The graph with only the scope's edges (what ``edges_touching`` walks and degrees count);
    other reads pass."""

    def __init__(self, graph: Graph, scope: Scope) -> None:
        self._graph, self._scope = graph, scope

    def neighbourhood(self, key: str, depth: int = 1) -> list[str]:
        if key not in self._scope.entities:
            return []
        if depth != 1:
            return [k for k in self._graph.neighbourhood(key, depth) if k in self._scope.entities]
        relations = self._scope.relations
        return [k for k in self._graph.neighbourhood(key, 1) if k == key or pair_key(key, k) in relations]

    def degrees(self, keys: list[str]) -> dict[str, int]:
        return {key: sum(1 for k in self.neighbourhood(key, 1) if k != key) for key in keys}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


class ScopedStore:
    def __init__(self, store: KnowledgeStore, scope: Scope) -> None:
        self._store, self._scope = store, scope

    def as_store(self) -> KnowledgeStore:
        """This view where a channel expects the store: it offers the same reads."""
        return cast("KnowledgeStore", self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    # --- searches ---

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        allowed = self._scope.vector_keys.get(table, frozenset())
        if not allowed or count <= 0:
            return []
        if len(allowed) <= EXACT_MAX:
            keys = list(allowed)
            similarity = self._store.similarities_sync(table, keys, vector)
            if len(similarity) == len(keys):
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

    # --- the graph ---

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        scope = self._scope
        return self._store.read_memory_sync(lambda rows, graph: read(rows, cast("Graph", _ScopedGraph(graph, scope))))

    def incident_sync(self, keys: list[str]) -> list[Incident]:
        """The scope's relations touching ``keys``, centrality by the scope's degrees (not cached:
        the store's per-commit lists are the whole graph's)."""
        return self.read_memory_sync(lambda rows, graph: incident_relations([incident_of(rows, graph, key)
                                                                               for key in keys]))

    def neighbourhood_sync(self, seeds: dict[str, float], *, hops: int, cap: int,
                           edge_cap: int | None = None) -> list[tuple[str, str]]:
        """The walk's edges from the in-scope seeds, the scope's edges only (the walk gives an
        entity reached only through other documents nothing)."""
        scope = self._scope
        inside = {k: w for k, w in seeds.items() if k in scope.entities}
        edges = self._store.neighbourhood_sync(inside, hops=hops, cap=cap, edge_cap=edge_cap) if inside else []
        return [edge for edge in edges if pair_key(*edge) in scope.relations]

    def pagerank_sync(self, seeds: dict[str, float], edges: list[tuple[str, str]], weights: list[float], *,
                      damping: float, limit: int) -> list[tuple[str, float]]:
        scope = self._scope
        inside = {k: w for k, w in seeds.items() if k in scope.entities}
        if not inside:
            return []
        kept = [i for i, edge in enumerate(edges) if pair_key(*edge) in scope.relations]
        ranked = self._store.pagerank_sync(inside, [edges[i] for i in kept], [weights[i] for i in kept],
                                           damping=damping, limit=len(inside) + 2 * len(kept))
        return [(k, s) for k, s in ranked if k in scope.entities][:limit]

    # --- what the matching documents said ---

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        found = self._store.descriptions_sync(table, wanted)
        partial = self._partly_in_scope(table, [key for key, _ in wanted])
        if partial:
            said = self._said([c for _, ids in partial.values() for c in ids])
            for key, (ident, ids) in partial.items():
                found[key] = scoped_description(table, ident, [said[c] for c in ids if c in said])
        return found

    def narrow_relations(self, relations: list[FoundRelation]) -> None:
        """The keywords and weight of relations also sourced outside the scope: only what the
        matching documents' chunks said (both are merged over every source otherwise)."""
        partial = self._partly_in_scope("relations", [r.vector_key for r in relations])
        if not partial:
            return
        said = self._said([c for _, ids in partial.values() for c in ids])
        for relation in relations:
            if relation.vector_key in partial:
                pair, ids = partial[relation.vector_key]
                told = [r for c in ids if c in said for r in said[c].relations.get(pair, [])]
                relation.keywords = list(dict.fromkeys(k for r in told for k in r.keywords))
                relation.weight = sum(r.weight for r in told)

    def _said(self, chunk_ids: list[str]) -> dict[str, ChunkIndex]:
        """Chunk id -> what its extraction says, by entity key and pair key (merge aliases resolved);
        kept on the scope, so the descriptions and the keywords of one retrieval, and the next
        retrievals with the same filter, read each chunk once."""
        known: dict[str, ChunkIndex] = self._scope.said
        missing = sorted({c for c in chunk_ids if c not in known})
        if missing:
            results = self._store.extractions_sync(missing)
            aliases = self._store.tables.graph_rows.aliases_sync()
            known.update({c: index_result(ExtractionResult.from_json(raw), aliases) for c, raw in results.items()})
        return {c: known[c] for c in chunk_ids if c in known}

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


def scoped_description(table: str, ident: str, said: list[ChunkIndex]) -> str:
    """What these chunks said of the entity (name key) or relation (pair key), each distinct
    description once, in source order; "" when none of them names it."""
    told = [item.description for index in said
            for item in (index.entities.get(ident, []) if table == "entities" else index.relations.get(ident, []))]
    return " ".join(dict.fromkeys(t.strip() for t in told if t.strip()))
