"""Lookups in the store for one query, through its public reads (all blocking: call them from a
worker thread). Vector searches return keys and similarities; names, keys and sources come from
the store's in-memory rows, degrees and neighbourhoods from its graph, texts from its tables."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
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
    return FoundEntity(meta.name_key, meta.name, meta.type, meta.source_ids, meta.key)


def _relation(rows: MemoryRows, meta: RelationMeta) -> FoundRelation:
    return found_relation(meta, rows.name_of(meta.source), rows.name_of(meta.target))


def found_relation(meta: RelationMeta, source_name: str, target_name: str, degree: int = 0) -> FoundRelation:
    return FoundRelation(meta.pair, meta.source, meta.target, source_name, target_name, list(meta.keywords),
                         meta.weight, meta.source_ids, meta.key, degree=degree)


def fill_descriptions(store: KnowledgeStore, entities: list[FoundEntity], relations: list[FoundRelation]) -> None:
    """Read the descriptions of the chosen entities and relations (an indexed read for each kind
    there are any of)."""
    if entities:
        text = store.descriptions_sync("entities", [(e.vector_key, e.key) for e in entities])
        for entity in entities:
            entity.description = text.get(entity.vector_key, "")
    if relations:
        text = store.descriptions_sync("relations", [(r.vector_key, r.pair) for r in relations])
        for relation in relations:
            relation.description = text.get(relation.vector_key, "")


def scored_entities(store: KnowledgeStore, scores: dict[str, float]) -> list[FoundEntity]:
    """The entities of ``scores``' keys, in its order, each with its score and degree (a key no
    longer in the store is left out)."""
    found = entities_by_name(store, list(scores))
    degree = degrees(store, list(found))
    entities = []
    for key, score in scores.items():
        if key in found:
            entity = found[key]
            entity.score, entity.degree = score, degree[key]
            entities.append(entity)
    return entities


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
    return store.chunk_texts_sync(keys)


def documents_of(store: KnowledgeStore, ids: list[str]) -> dict[str, list[str]]:
    def read(rows: MemoryRows, graph: Graph) -> dict[str, list[str]]:
        return {i: list(rows.chunk_documents.get(i, ())) for i in ids}
    return store.read_memory_sync(read)


def degrees(store: KnowledgeStore, keys: list[str]) -> dict[str, int]:
    return store.read_memory_sync(lambda rows, graph: graph.degrees(keys))


def edge_facts(store: KnowledgeStore, pairs: list[str]) -> dict[str, tuple[tuple[str, ...], str, str, int]]:
    """pair -> (keywords, source name, target name, vector key) of the known ones: what weighing an
    edge against the question needs, read without building a record per edge."""
    def read(rows: MemoryRows, graph: Graph) -> dict[str, tuple[tuple[str, ...], str, str, int]]:
        facts = {}
        for pair in pairs:
            meta = rows.relation(pair)
            if meta is not None:
                source, target = rows.entity(meta.source), rows.entity(meta.target)
                facts[pair] = (tuple(meta.keywords), source.name if source else meta.source,
                               target.name if target else meta.target, meta.key)
        return facts
    return store.read_memory_sync(read)


def central_incident_relations(store: KnowledgeStore, keys: list[str], count: int,
                               relevance: Callable[[Sequence[str], str, str], float] | None = None
                               ) -> list[FoundRelation]:
    """The ``count`` best relations touching ``keys``: by ``relevance(keywords, source name,
    target name)`` when given, then the most central (endpoint degrees summed), then the heaviest;
    ties in the order of ``keys``. Each with its ``degree``. Ranked before any is built, from the
    store's per-commit lists (``incident_sync``): a dense graph's entities touch thousands of
    relations."""
    incident = store.incident_sync(keys)
    asked = ([relevance(i.meta.keywords, i.source_name, i.target_name) for i in incident] if relevance is not None
             else [0.0] * len(incident))
    best = heapq.nsmallest(count, range(len(incident)),
                           key=lambda n: (-asked[n], -incident[n].central, -incident[n].meta.weight, n))
    return [found_relation(incident[n].meta, incident[n].source_name, incident[n].target_name, incident[n].central)
            for n in best]


def edges_touching(graph: Graph, keys: list[str]) -> dict[str, tuple[str, str]]:
    """Pair key -> (key, neighbour) of every edge touching ``keys``, in the order of ``keys``
    (the first end met first). Called under the store's lock."""
    pairs: dict[str, tuple[str, str]] = {}
    for key in keys:
        for neighbour in graph.neighbourhood(key, 1):
            if neighbour != key:
                pairs.setdefault(pair_key(key, neighbour), (key, neighbour))
    return pairs


def pairs_among(store: KnowledgeStore, keys: list[str]) -> list[str]:
    """Pair keys of the edges joining two of ``keys``, in the order of ``incident_pairs``: a hub's
    other edges (thousands) are passed over without making their keys."""
    among = set(keys)

    def read(rows: MemoryRows, graph: Graph) -> list[str]:
        pairs: dict[str, None] = {}
        for key in keys:
            for neighbour in graph.neighbourhood(key, 1):
                if neighbour != key and neighbour in among:
                    pairs.setdefault(pair_key(key, neighbour))
        return list(pairs)
    return store.read_memory_sync(read)


def incident_pairs(store: KnowledgeStore, keys: list[str]) -> list[str]:
    """Pair keys of every edge touching ``keys``, in the order of ``keys``."""
    return store.read_memory_sync(lambda rows, graph: list(edges_touching(graph, keys)))


def set_relation_degrees(store: KnowledgeStore, relations: list[FoundRelation]) -> None:
    """Each relation's centrality: the degrees of its two endpoints, summed."""
    degree = degrees(store, list({k for r in relations for k in (r.source, r.target)}))
    for relation in relations:
        relation.degree = degree.get(relation.source, 0) + degree.get(relation.target, 0)
