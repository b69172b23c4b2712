"""Lookups in the store for one query, through its public reads (all blocking: call them from a
worker thread). Vector searches return keys and similarities; names, keys and sources come from
the store's in-memory rows, degrees and neighbourhoods from its graph, texts from its tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from proxy.retrieval.found import FoundEntity, FoundRelation
from proxy.store.changes import pair_key

if TYPE_CHECKING:  # the types the store's reads hand over
    from proxy.store.protocols.graph import Graph
    from proxy.store.store import (
        EntityMeta,
        KnowledgeStore,
        MemoryRows,
        RelationMeta,
    )


def vector_search(store: KnowledgeStore, table: str, vector: np.ndarray, count: int,
                  threshold: float) -> list[tuple[int, float]]:
    return [(key, score) for key, score in store.search_sync(table, vector, count) if score >= threshold]


def _entity(meta: EntityMeta) -> FoundEntity:
    return FoundEntity(meta.name_key, meta.name, meta.type, list(meta.source_ids), meta.key)


def _relation(rows: MemoryRows, meta: RelationMeta) -> FoundRelation:
    names = [entity.name if (entity := rows.entity(k)) is not None else k for k in (meta.source, meta.target)]
    return FoundRelation(meta.pair, meta.source, meta.target, names[0], names[1], list(meta.keywords),
                         meta.weight, list(meta.source_ids), meta.key)


def fill_descriptions(store: KnowledgeStore, entities: list[FoundEntity], relations: list[FoundRelation]) -> None:
    """Read the descriptions of the chosen entities and relations (two indexed reads)."""
    text = store.tables.retrieval_rows.descriptions_sync("entities", [(e.vector_key, e.key) for e in entities])
    for entity in entities:
        entity.description = text.get(entity.vector_key, "")
    text = store.tables.retrieval_rows.descriptions_sync("relations", [(r.vector_key, r.pair) for r in relations])
    for relation in relations:
        relation.description = text.get(relation.vector_key, "")


def entities_by_keys(store: KnowledgeStore, keys: list[int]) -> dict[int, FoundEntity]:
    def read(rows: MemoryRows, graph: Graph) -> dict[int, FoundEntity]:
        return {k: _entity(rows.entities[k]) for k in keys if k in rows.entities}
    return store.read_memory_sync(read)


def entities_by_name(store: KnowledgeStore, names: list[str]) -> dict[str, FoundEntity]:
    def read(rows: MemoryRows, graph: Graph) -> dict[str, FoundEntity]:
        found = {n: rows.entity(n) for n in names}
        return {n: _entity(m) for n, m in found.items() if m is not None}
    return store.read_memory_sync(read)


def relations_by_keys(store: KnowledgeStore, keys: list[int]) -> dict[int, FoundRelation]:
    def read(rows: MemoryRows, graph: Graph) -> dict[int, FoundRelation]:
        return {k: _relation(rows, rows.relations[k]) for k in keys if k in rows.relations}
    return store.read_memory_sync(read)


def relations_by_pairs(store: KnowledgeStore, pairs: list[str]) -> dict[str, FoundRelation]:
    def read(rows: MemoryRows, graph: Graph) -> dict[str, FoundRelation]:
        found = {p: rows.relation(p) for p in pairs}
        return {p: _relation(rows, m) for p, m in found.items() if m is not None}
    return store.read_memory_sync(read)


def chunk_keys(store: KnowledgeStore, ids: list[str]) -> dict[str, int]:
    def read(rows: MemoryRows, graph: Graph) -> dict[str, int]:
        return {i: rows.chunk_keys[i] for i in ids if i in rows.chunk_keys}
    return store.read_memory_sync(read)


def chunk_ids(store: KnowledgeStore, keys: list[int]) -> dict[int, str]:
    def read(rows: MemoryRows, graph: Graph) -> dict[int, str]:
        return {k: rows.chunk_ids[k] for k in keys if k in rows.chunk_ids}
    return store.read_memory_sync(read)


def chunk_texts(store: KnowledgeStore, keys: list[int]) -> dict[str, tuple[str, int]]:
    """id -> (content, tokens) of the chunks with these vector keys: the one table read of a chunk list."""
    return store.tables.retrieval_rows.chunk_texts_sync(keys)


def documents_of(store: KnowledgeStore, ids: list[str]) -> dict[str, list[str]]:
    def read(rows: MemoryRows, graph: Graph) -> dict[str, list[str]]:
        return {i: list(rows.chunk_documents.get(i, ())) for i in ids}
    return store.read_memory_sync(read)


def degrees(store: KnowledgeStore, keys: list[str]) -> dict[str, int]:
    return store.read_memory_sync(lambda rows, graph: graph.degrees(keys))


def incident_pairs(store: KnowledgeStore, keys: list[str]) -> list[str]:
    """Pair keys of every edge touching ``keys``, in the order of ``keys``."""
    def read(rows: MemoryRows, graph: Graph) -> list[str]:
        pairs: dict[str, None] = {}
        for key in keys:
            for neighbour in graph.neighbourhood(key, 1):
                if neighbour != key:
                    pairs[pair_key(key, neighbour)] = None
        return list(pairs)
    return store.read_memory_sync(read)


def chunk_vectors(store: KnowledgeStore, keys: list[int]) -> np.ndarray:
    return store.vectors_sync("chunks", keys)


def set_relation_degrees(store: KnowledgeStore, relations: list[FoundRelation]) -> None:
    """Each relation's centrality: the degrees of its two endpoints, summed."""
    degree = degrees(store, list({k for r in relations for k in (r.source, r.target)}))
    for relation in relations:
        relation.degree = degree.get(relation.source, 0) + degree.get(relation.target, 0)
