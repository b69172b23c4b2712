"""The expansion channel (issue 18, item 3; HippoRAG 2's recipe): a personalised PageRank from
the question's seed entities (the ones it names, found by the name index, and the ones nearest its
vector) over their neighbourhood up to two hops, every edge weighted by its relevance to the
question. The best-ranked entities are added with the relations joining them, so the entity a
2-hop question goes through (the bridge) comes with its own facts. It runs when the ``expansion``
knob is ``ppr``; it needs no keywords.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.channels.linked import linked_keys
from proxy.retrieval.found import Found, FoundEntity, FoundRelation
from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import edge_cosines, edge_relevance, unanswered
from proxy.retrieval.select import word_stems
from proxy.retrieval.stages import Question
from proxy.store.changes import pair_key, split_pair

if TYPE_CHECKING:
    from proxy.store.store import KnowledgeStore

HOPS = 3             # a 3-hop chain: the bridge one hop from a seed, the next one further, its facts a third
CAP = 2000           # entities the PageRank runs over at most: its time does not grow with the graph
EDGE_CAP = 500       # edges weighed at most (nearest the seeds first): in a dense graph 2,000 entities
                     # share thousands, and weighing each against the question costs ~10 us of Python
DAMPING = 0.5        # HippoRAG 2's: half the walk restarts at the seeds, so scores stay near them
VECTOR_SEEDS = 5     # entities nearest the question's vector that seed the walk besides the named ones
VECTOR_SEED_WEIGHT = 0.5  # a vector neighbour of the question counts half as much as an entity it names
EDGE_FLOOR = 0.05    # an edge unrelated to the question still carries a little of the walk


def seeds_of(store: KnowledgeStore, question: Question) -> dict[str, float]:
    """Entity key -> restart weight: the entities the question names, then those nearest its vector."""
    seeds = linked_keys(store, question)
    vector = question.vectors.get("low", question.vectors["query"])
    matches = search.vector_search(store, "entities", vector, VECTOR_SEEDS, question.params.cosine_threshold)
    found = search.entities_by_keys(store, [key for key, _ in matches])
    for key, score in matches:
        if key in found:
            seeds.setdefault(found[key].key, score * VECTOR_SEED_WEIGHT)
    return seeds


def edge_weights(store: KnowledgeStore, question: Question, pairs: list[tuple[str, str]],
                 known: dict[str, float], seeds: dict[str, float]) -> list[float]:
    """Each edge's relevance to the question (``edge_relevance``), never below ``EDGE_FLOOR``;
    ``known`` keeps them by pair key (the joining relations are ranked by them too). An edge beyond
    the seeds' own is judged by what the path reaching it left unanswered (``by_hops``)."""
    keys = [pair_key(source, target) for source, target in pairs]
    facts = search.edge_facts(store, list(dict.fromkeys(keys)))
    similarity = edge_cosines(store, question, facts)

    def judge(asked: str | None, group: list[str]) -> dict[str, float]:
        if asked is not None and not asked.strip():
            return dict.fromkeys(group, 0.0)   # the path answered every word: nothing further is asked for
        return edge_relevance(store, question, {pair: facts[pair] for pair in group}, asked=asked,
                              similarity=similarity)

    known.update(by_hops(question, facts, seeds, judge))
    return [EDGE_FLOOR + known.get(key, 0.0) for key in keys]


def by_hops(question: Question, facts: dict[str, tuple[tuple[str, ...], str, str, int]], seeds: dict[str, float],
            judge: Callable[[str | None, list[str]], dict[str, float]]) -> dict[str, float]:
    """Every edge's relevance, hop by hop from the seeds: an edge touching a seed is judged by the
    question; an entity it reaches keeps the words that edge's keywords leave unanswered, and the
    edges onward from it are judged by those. In "where is the head office of the company that
    acquired the maker of P?", P's maker answers "maker", its acquirer "acquired", and the acquirer's
    head office is the edge that matters then, not the acquirer's own acquisitions (which would
    spread the walk over every company it touches). Edges no path reaches are judged by the question."""
    touching: dict[str, list[str]] = {}
    for pair in facts:
        for key in split_pair(pair):
            touching.setdefault(key, []).append(pair)
    rest: dict[str, str | None] = dict.fromkeys(seeds)   # what is left to ask at each entity reached (None: all)
    relevance: dict[str, float] = {}
    frontier = [key for key in seeds if key in touching]
    while frontier:
        asked_by: dict[str, str | None] = {}   # each edge leaving the frontier, and the words it is judged by
        for key in frontier:
            for pair in touching[key]:
                if pair not in relevance:
                    asked_by.setdefault(pair, rest[key])
        groups: dict[str | None, list[str]] = {}
        for pair, asked in asked_by.items():
            groups.setdefault(asked, []).append(pair)
        for asked, group in groups.items():
            relevance.update(judge(asked, group))
        reached: list[str] = []
        for pair in sorted(asked_by, key=lambda p: -relevance[p]):   # each new entity by its best edge
            for here, there in (split_pair(pair), split_pair(pair)[::-1]):
                if here in rest and there not in rest and asked_by[pair] == rest[here]:
                    rest[there] = unanswered(question, word_stems(" ".join(facts[pair][0])), rest[here])
                    reached.append(there)
        frontier = reached
    missed = [pair for pair in facts if pair not in relevance]
    if missed:
        relevance.update(judge(None, missed))
    return relevance


class ExpansionChannel:
    name = "expansion"
    vector = "query"   # seeds come from names and the question's own vector: keywords are not needed

    def enabled(self, params: QueryParams) -> bool:
        return params.expansion == "ppr"

    def search(self, store: KnowledgeStore, question: Question) -> Found:
        params = question.params
        seeds = seeds_of(store, question)
        if not seeds:
            return Found()
        relevance: dict[str, float] = {}
        ranked = dict(store.expand_sync(seeds, lambda pairs: edge_weights(store, question, pairs, relevance, seeds),
                                        hops=HOPS, cap=CAP, damping=DAMPING, limit=params.top_k,
                                        edge_cap=EDGE_CAP))
        entities = self.entities(store, ranked)
        return Found(entities, self.joining(store, question, ranked, relevance))

    def entities(self, store: KnowledgeStore, ranked: dict[str, float]) -> list[FoundEntity]:
        found = search.entities_by_name(store, list(ranked))
        degree = search.degrees(store, list(found))
        entities = []
        for key, score in ranked.items():
            if key in found:
                entity = found[key]
                entity.score, entity.degree = score, degree[key]
                entities.append(entity)
        return entities

    def joining(self, store: KnowledgeStore, question: Question, ranked: dict[str, float],
                relevance: dict[str, float]) -> list[FoundRelation]:
        """The relations between two of the ranked entities, by the walk's flow along them: each
        endpoint's PageRank times the edge's share of that endpoint's weighed edges (the weights
        kept from the walk): the seed's edge to the bridge, then the bridge's asked-for fact, not a
        hub's many others. Only the best ``top_k`` are read.
        (Discounting each kind's later relations was measured: it cost 2-hop and list recall.)"""
        pairs = [pair for pair in search.incident_pairs(store, list(ranked))
                 if all(key in ranked for key in split_pair(pair))]   # only the edges among them
        strength: dict[str, float] = {}   # each entity's weighed edges, summed: how its walk splits
        scope = question.scope   # under a metadata filter the walk gave the edges outside it no weight
        for pair, weight in relevance.items():
            if scope is not None and pair not in scope.relations:
                continue
            for key in split_pair(pair):
                strength[key] = strength.get(key, 0.0) + EDGE_FLOOR + weight
        score = {pair: sum(ranked[key] / strength.get(key, 1.0) for key in split_pair(pair))
                 * (EDGE_FLOOR + relevance.get(pair, 0.0)) for pair in pairs}
        best = heapq.nsmallest(question.params.top_k, range(len(pairs)), key=lambda i: (-score[pairs[i]], i))
        relations = list(search.relations_by_pairs(store, [pairs[i] for i in sorted(best)]).values())
        search.set_relation_degrees(store, relations)
        for relation in relations:
            relation.score = score[relation.pair]
        return sorted(relations, key=lambda r: (-r.score, -r.degree, -r.weight))
