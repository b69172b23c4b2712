"""The chosen graph items' own chunks: each entity's and relation's source chunks, picked by
similarity to the question (``vector``) or by weighted polling (``weight``). Blocking reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from proxy.retrieval.found import ChunkHit, FoundEntity, FoundRelation
from proxy.retrieval.select import by_similarity, weighted_quota
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads


def graph_sources(store: RetrievalReads, question: Question, entities: list[FoundEntity],
                  relations: list[FoundRelation]) -> list[list[ChunkHit]]:
    """Two chunk lists: the entities' sources, then the relations' (without the entities')."""
    entity_ids = pick(store, question, [e.source_ids for e in entities], set())
    relation_ids = pick(store, question, [r.source_ids for r in relations], set(entity_ids))
    return [[ChunkHit(i, 0.0, "entity") for i in entity_ids], [ChunkHit(i, 0.0, "relation") for i in relation_ids]]


def pick(store: RetrievalReads, question: Question, given: list[Sequence[str]], taken: set[str]) -> list[str]:
    params = question.params
    sources = [[c for c in ids if c not in taken] for ids in given]
    if not any(sources):
        return []
    if params.chunk_selection == "weight":
        return weighted_quota(sources, params.related_chunks)
    candidates = list(dict.fromkeys(c for ids in sources for c in ids))
    keys = store.chunk_keys_sync(candidates)
    present = [c for c in candidates if c in keys]
    cosines = store.similarities_sync("chunks", [keys[c] for c in present], question.vectors["query"])
    if len(cosines) != len(present):  # index out of step: fall back to weighted polling
        return weighted_quota(sources, params.related_chunks)
    similarity = dict(zip(present, cosines.tolist(), strict=True))
    return by_similarity(sources, params.related_chunks, similarity)
