"""How relevant a relation is to the question, by the question's relation words (its words that
name neither of the relation's entities): the share of the relation's keywords they match, plus
the share of them its description holds (``relation_match``), plus a little of the cosine of its
vector to the question's (so an embedder's sense of meaning counts too, without the entity names
every edge of a hub shares deciding). Used to rank a hub's relations by the kind asked for (the
``relation_ranking`` knob) and to weight the edges of the expansion's PageRank. Blocking reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from proxy.retrieval.found import FoundRelation
from proxy.retrieval.search import fill_descriptions
from proxy.retrieval.select import cosine_to, relation_match, word_stems
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.store import KnowledgeStore

COSINE_SHARE = 0.2   # the vectors' part: with a hub's name in every one of its edges, words decide


def relation_relevance(store: KnowledgeStore, question: Question, relations: list[FoundRelation],
                       *, descriptions: bool = True) -> list[float]:
    """One score per relation, higher for those about what the question asks (reads the
    descriptions of those that have none yet, unless ``descriptions`` is False: then only what
    is in memory and the vectors count)."""
    if not relations:
        return []
    if descriptions:
        fill_descriptions(store, [], [r for r in relations if not r.description])
    vectors = store.vectors_sync("relations", [r.vector_key for r in relations])
    if vectors.shape[0] == len(relations):
        similarity = np.clip(cosine_to(question.vectors["query"], vectors), 0.0, None).tolist()
    else:  # the index is out of step with the rows: the words alone decide
        similarity = [0.0] * len(relations)
    stems = word_stems(question.asked)
    return [relation_match(stems, r.keywords, r.description, (r.source_name, r.target_name)) + COSINE_SHARE * sim
            for sim, r in zip(similarity, relations, strict=True)]


def rank_by_question(store: KnowledgeStore, question: Question, relations: list[FoundRelation], *,
                     descriptions: bool = True) -> list[FoundRelation]:
    """The most relevant to the question first, then the most central, then the heaviest (by the
    keywords and vectors alone without ``descriptions``: no read per relation)."""
    relevance = dict(zip((r.pair for r in relations),
                         relation_relevance(store, question, relations, descriptions=descriptions), strict=True))
    return sorted(relations, key=lambda r: (-relevance[r.pair], -r.degree, -r.weight))
