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
from typing import TYPE_CHECKING

import numpy as np

from proxy.extraction.results import ExtractionResult
from proxy.merging.rules import ChunkIndex, index_result
from proxy.retrieval.found import FoundRelation
from proxy.retrieval.scope import Scope
from proxy.store.changes import pair_key

if TYPE_CHECKING:
    from proxy.store.incident import Incident
    from proxy.store.memory_reads import NamedRelation
    from proxy.store.protocols.communities import StoredCommunity
    from proxy.store.protocols.retrieval import RetrievalReads, RetrievalSource
    from proxy.store.rows_memory import EntityMeta

EXACT_MAX = 4096      # a scope this small is searched exactly: its vectors read and compared (~1 ms)
OVERFETCH = 4         # else the index is asked for this many times more, again until enough are in scope


class ScopedStore:
    """The store's reads (``RetrievalReads``) as a retrieval under a filter sees them."""

    def __init__(self, store: RetrievalSource, scope: Scope) -> None:
        self._store, self._scope = store, scope
        self._graph = store.within(scope)   # the named graph reads over the scope's edges only

    def as_reads(self) -> RetrievalReads:
        return self

    @property
    def generation(self) -> int:
        return self._store.generation

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

    # --- rows and texts: the store's own (the channels' finds are checked against the scope) ---

    def vector_count(self, table: str) -> int:
        return self._store.vector_count(table)

    def keyword_count(self, table: str) -> int:
        return self._store.keyword_count(table)

    def similarities_sync(self, table: str, keys: list[int], vector: np.ndarray) -> np.ndarray:
        return self._store.similarities_sync(table, keys, vector)

    def entity_rows_sync(self, keys: list[int]) -> dict[int, EntityMeta]:
        return self._store.entity_rows_sync(keys)

    def entities_named_sync(self, names: list[str]) -> dict[str, EntityMeta]:
        return self._store.entities_named_sync(names)

    def relation_rows_sync(self, keys: list[int]) -> dict[int, NamedRelation]:
        return self._store.relation_rows_sync(keys)

    def relations_paired_sync(self, pairs: list[str]) -> dict[str, NamedRelation]:
        return self._store.relations_paired_sync(pairs)

    def chunk_keys_sync(self, ids: list[str]) -> dict[str, int]:
        return self._store.chunk_keys_sync(ids)

    def chunk_ids_sync(self, keys: list[int]) -> dict[int, str]:
        return self._store.chunk_ids_sync(keys)

    def chunk_documents_sync(self, ids: list[str]) -> dict[str, list[str]]:
        return self._store.chunk_documents_sync(ids)

    def community_rows_sync(self, keys: list[int]) -> dict[int, StoredCommunity]:
        return self._store.community_rows_sync(keys)

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]:
        return self._store.chunk_texts_sync(keys)

    # --- the graph: the scope's edges only ---

    def degrees_sync(self, keys: list[str]) -> dict[str, int]:
        return self._graph.degrees_sync(keys)

    def edge_facts_sync(self, pairs: list[str]) -> dict[str, tuple[tuple[str, ...], str, str, int]]:
        return self._graph.edge_facts_sync(pairs)

    def incident_pairs_sync(self, keys: list[str]) -> list[str]:
        return self._graph.incident_pairs_sync(keys)

    def pairs_among_sync(self, keys: list[str]) -> list[str]:
        return self._graph.pairs_among_sync(keys)

    def incident_sync(self, keys: list[str]) -> list[Incident]:
        """The scope's relations touching ``keys``, centrality by the scope's degrees (not cached:
        the store's per-commit lists are the whole graph's)."""
        return self._graph.incident_listed_sync(keys)

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
            aliases = self._store.aliases_sync()
            known.update({c: index_result(ExtractionResult.from_json(raw), aliases) for c, raw in results.items()})
        return {c: known[c] for c in chunk_ids if c in known}

    def _partly_in_scope(self, table: str, keys: list[int]) -> dict[int, tuple[str, list[str]]]:
        """Vector key -> (name or pair key, in-scope sources) of the rows some of whose sources are out."""
        chunks = self._scope.chunks
        out = {}
        for key, (ident, sources) in self._store.sources_sync(table, keys).items():
            inside = [c for c in sources if c in chunks]
            if inside and len(inside) < len(sources):
                out[key] = (ident, inside)
        return out


def scoped_description(table: str, ident: str, said: list[ChunkIndex]) -> str:
    """What these chunks said of the entity (name key) or relation (pair key), each distinct
    description once, in source order; "" when none of them names it."""
    told = [item.description for index in said
            for item in (index.entities.get(ident, []) if table == "entities" else index.relations.get(ident, []))]
    return " ".join(dict.fromkeys(t.strip() for t in told if t.strip()))
