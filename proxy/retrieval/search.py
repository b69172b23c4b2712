"""Lookups in the store for one query, through its public reads (all blocking: call them from a
worker thread). Vector searches return keys and similarities; names, keys and sources come from
the store's in-memory rows, degrees and neighbourhoods from its graph, texts from its tables."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from proxy.retrieval.found import FoundEntity, FoundRelation

if TYPE_CHECKING:  # the types the store's reads hand over
    from proxy.store.memory_reads import NamedRelation
    from proxy.store.protocols.retrieval import RetrievalReads
    from proxy.store.rows_memory import EntityMeta, RelationMeta


def vector_search(store: RetrievalReads, table: str, vector: np.ndarray, count: int,
                  threshold: float) -> list[tuple[int, float]]:
    return [(key, score) for key, score in store.search_sync(table, vector, count) if score >= threshold]


def _entity(meta: EntityMeta) -> FoundEntity:
    return FoundEntity(meta.name_key, meta.name, meta.type, meta.source_ids, meta.key)


def _relation(named: NamedRelation) -> FoundRelation:
    return found_relation(named.meta, named.source_name, named.target_name)


def found_relation(meta: RelationMeta, source_name: str, target_name: str, degree: int = 0) -> FoundRelation:
    return FoundRelation(meta.pair, meta.source, meta.target, source_name, target_name, list(meta.keywords),
                         meta.weight, meta.source_ids, meta.key, degree=degree)


def fill_descriptions(store: RetrievalReads, entities: list[FoundEntity], relations: list[FoundRelation]) -> None:
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


def scored_entities(store: RetrievalReads, scores: dict[str, float]) -> list[FoundEntity]:
    """The entities of ``scores``' keys, in its order, each with its score and degree (a key no
    longer in the store is left out)."""
    found = entities_by_name(store, list(scores))
    degree = store.degrees_sync(list(found))
    entities = []
    for key, score in scores.items():
        if key in found:
            entity = found[key]
            entity.score, entity.degree = score, degree[key]
            entities.append(entity)
    return entities


def entities_by_keys(store: RetrievalReads, keys: list[int]) -> dict[int, FoundEntity]:
    return {k: _entity(meta) for k, meta in store.entity_rows_sync(keys).items()}


def entities_by_name(store: RetrievalReads, names: list[str]) -> dict[str, FoundEntity]:
    return {n: _entity(meta) for n, meta in store.entities_named_sync(names).items()}


def relations_by_keys(store: RetrievalReads, keys: list[int]) -> dict[int, FoundRelation]:
    return {k: _relation(named) for k, named in store.relation_rows_sync(keys).items()}


def relations_by_pairs(store: RetrievalReads, pairs: list[str]) -> dict[str, FoundRelation]:
    return {p: _relation(named) for p, named in store.relations_paired_sync(pairs).items()}


def central_incident_relations(store: RetrievalReads, keys: list[str], count: int,
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


def set_relation_degrees(store: RetrievalReads, relations: list[FoundRelation]) -> None:
    """Each relation's centrality: the degrees of its two endpoints, summed."""
    degree = store.degrees_sync(list({k for r in relations for k in (r.source, r.target)}))
    for relation in relations:
        relation.degree = degree.get(relation.source, 0) + degree.get(relation.target, 0)
