"""How relevant a relation is to the question, by the question's relation words (its words that
name neither of the relation's entities): the share of the relation's keywords they match, plus
the share of them its description holds (``relation_match``), plus a little of the cosine of its
vector to the question's (so an embedder's sense of meaning counts too, without the entity names
every edge of a hub shares deciding). Used to rank a hub's relations by the kind asked for (the
``relation_ranking`` knob) and to weight the edges of the expansion's PageRank. Blocking reads."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from proxy.retrieval.found import FoundRelation
from proxy.retrieval.search import fill_descriptions
from proxy.retrieval.select import keyword_match, relation_match, word_stems
from proxy.retrieval.stages import Question
from proxy.text.word_forms import cut_names, relation_words, word_senses
from proxy.text.words import strong

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

COSINE_SHARE = 0.2   # the vectors' part: with a hub's name in every one of its edges, words decide


def cosines(store: RetrievalReads, question: Question, relations: list[FoundRelation]) -> dict[str, float]:
    """Each relation's cosine to the question's vector (0 below zero, or when the index is out of
    step with the rows: then the words alone decide)."""
    if not relations:
        return {}
    cosines = store.similarities_sync("relations", [r.vector_key for r in relations], question.vectors["query"])
    if len(cosines) != len(relations):
        return {}
    similarity = np.clip(cosines, 0.0, None).tolist()
    return {r.pair: sim for r, sim in zip(relations, similarity, strict=True)}


def relation_relevance(store: RetrievalReads, question: Question, relations: list[FoundRelation],
                       *, descriptions: bool = True, similarity: dict[str, float] | None = None,
                       named: Sequence[str] = ()) -> list[float]:
    """One score per relation, higher for those about what the question asks (reads the
    descriptions of those that have none yet, unless ``descriptions`` is False: then only what
    is in memory and the vectors count; ``similarity``: the cosines, when already read; ``named``:
    the names of the entities the question names, cut out of its words with the relation's own)."""
    if not relations:
        return []
    if descriptions:
        fill_descriptions(store, [], [r for r in relations if not r.description])
    sims = similarity if similarity is not None else cosines(store, question, relations)
    asked = cut_names(question.asked, tuple(named))
    return [relation_match(relation_words(asked, (r.source_name, r.target_name)), r.keywords,
                           r.description, (r.source_name, r.target_name))
            + COSINE_SHARE * sims.get(r.pair, 0.0) for r in relations]


def edge_relevance(store: RetrievalReads, question: Question,
                   facts: dict[str, tuple[tuple[str, ...], str, str, int]], *, asked: str | None = None,
                   similarity: dict[str, float] | None = None, named: Sequence[str] = ()) -> dict[str, float]:
    """``relation_relevance`` without descriptions, from ``search.edge_facts``: the expansion weighs
    hundreds of edges per turn, and building a record for each cost more than the walk. ``asked``:
    the words to judge them by, when not the question's own; ``similarity``: the vectors' part
    (``edge_cosines``: what stands out of the neighbourhood's cosines), when read; ``named``: as for
    ``relation_relevance``."""
    if not facts:
        return {}
    pairs = list(facts)
    if similarity is None:
        similarity = edge_cosines(store, question, facts)
    text = cut_names(question.asked if asked is None else asked, tuple(named))
    # ``relation_match`` without a description is the keywords' share alone
    return {pair: keyword_match(relation_words(text, (fact[1], fact[2])), fact[0])
            + COSINE_SHARE * similarity.get(pair, 0.0) for pair in pairs for fact in (facts[pair],)}


def edge_cosines(store: RetrievalReads, question: Question,
                 facts: dict[str, tuple[tuple[str, ...], str, str, int]]) -> dict[str, float]:
    """How far each edge's cosine to the question's vector stands out of the batch's (``standing_out``;
    none when the index is out of step)."""
    pairs = list(facts)
    cosines = store.similarities_sync("relations", [facts[p][3] for p in pairs], question.vectors["query"])
    if len(cosines) != len(pairs):
        return {}
    return dict(zip(pairs, standing_out(np.asarray(cosines)).tolist(), strict=True))


def standing_out(cosines: np.ndarray) -> np.ndarray:
    """How far each cosine stands above the batch's median, as a share of the way from it to 1. A
    neural embedder's cosines are all high (0.8-0.9 for e5 between any question and any fact):
    taken as they are, every edge weighs alike and a hub's walk spreads over all its edges; the
    part above the neighbourhood's typical similarity is the signal."""
    cosines = np.nan_to_num(cosines)   # a zero vector's cosine is NaN on PostgreSQL: it would make every weight NaN
    floor = float(np.median(cosines)) if cosines.size else 1.0
    if floor >= 1.0:   # nothing, or nothing can stand out
        return np.zeros_like(cosines)
    return np.clip((cosines - floor) / (1.0 - floor), 0.0, 1.0)


def unanswered(question: Question, said: frozenset[str], asked: str | None = None) -> str:
    """The question's words (and themes; or those of ``asked``, what earlier hops left) that ``said``
    (a hop's keywords' or description's stems) does not meet fully (``strong``): what is left to
    answer after that hop. A character shared elsewhere in a word does not answer it: 零部件
    (components) answers no 总部 (head office), 供应商 (supplier) no 制造商 (maker)."""
    return _left(question.asked if asked is None else asked, said)


@functools.lru_cache(maxsize=8192)   # a walk reaches hundreds of entities by edges of a few kinds
def left_after(asked: str, keywords: tuple[str, ...]) -> str:
    """``unanswered``: what of ``asked`` an edge with ``keywords`` leaves (the walk's next hop)."""
    return _left(asked, word_stems(" ".join(keywords)))


def _left(asked: str, said: frozenset[str]) -> str:
    return " ".join(word for word, senses in word_senses(asked) if not strong(senses & said))


def hop_confidence(relevance: float, choices: int) -> float:
    """How surely a path goes on along an edge: its relevance to what is left (capped at 1), but
    never less than its share among the ``choices`` edges of the entity it leaves. A product's only
    edge is its maker's, whatever the question calls it ("who chairs the firm that acquired the
    maker of P?" against "P comes from the workshops of M"); a hub's edge that answers nothing is
    one of fifty and carries next to nothing."""
    return max(min(1.0, relevance), 1.0 / max(choices, 1))
