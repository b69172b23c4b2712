"""The expansion channel (issue 18, item 3; HippoRAG 2's recipe): a personalised PageRank from
the question's seed entities (the ones it names, found by the name index, and the ones nearest its
vector) over their neighbourhood up to two hops, every edge weighted by its relevance to what the
path reaching it left unanswered (``Chains``). The strongest chains are followed further, a hop at
a time, up to four hops (3- and 4-hop questions), and each brings its best next fact. The
best-ranked entities are added with the relations joining them, so the entity a 2-hop question goes
through (the bridge) comes with its own facts. It runs when the ``expansion`` knob is ``ppr``; it
needs no keywords.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.channels.linked import linked_keys
from proxy.retrieval.found import Found, FoundRelation
from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import edge_cosines, edge_relevance, hop_confidence, left_after
from proxy.retrieval.stages import Question
from proxy.store.changes import pair_key, split_pair

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

HOPS = 2             # the walk's rings: the bridge is one hop from a seed, its facts one further
MAX_HOPS = 4         # the strongest chains are followed this far, a hop at a time past the rings
BEAM = 8             # chain ends followed one hop further, the strongest first
BEAM_EDGES = 200     # edges those add at most (a hub's hundreds would be weighed for nothing)
CAP = 2000           # entities the PageRank runs over at most: its time does not grow with the graph
EDGE_CAP = 500       # edges weighed at most (nearest the seeds first): in a dense graph 2,000 entities
                     # share thousands, and weighing each against the question costs ~10 us of Python
DAMPING = 0.5        # HippoRAG 2's: half the walk restarts at the seeds, so scores stay near them
VECTOR_SEEDS = 5     # entities nearest the question's vector that seed the walk besides the named ones
VECTOR_SEED_WEIGHT = 0.5  # a vector neighbour of the question counts half as much as an entity it names
EDGE_FLOOR = 0.05    # an edge unrelated to the question still carries a little of the walk


def seeds_of(store: RetrievalReads, question: Question) -> dict[str, float]:
    """Entity key -> restart weight: the entities the question names, then those nearest its vector."""
    seeds = linked_keys(store, question)
    vector = question.vectors.get("low", question.vectors["query"])
    matches = search.vector_search(store, "entities", vector, VECTOR_SEEDS, question.params.cosine_threshold)
    found = search.entities_by_keys(store, [key for key, _ in matches])
    for key, score in matches:
        if key in found:
            seeds.setdefault(found[key].key, score * VECTOR_SEED_WEIGHT)
    return seeds


Judge = Callable[[str | None, list[str]], dict[str, float]]


class Chains:
    """What is still asked at each entity the walk reaches, hop by hop from the seeds: an edge
    touching a seed is judged by the question; an entity it reaches keeps the words that edge's
    keywords leave unanswered, and the edges onward from it are judged by those. In "where is the
    head office of the company that acquired the maker of P?", P's maker answers "maker", its
    acquirer "acquired", and the acquirer's head office is the edge that matters then, not the
    acquirer's own acquisitions (which would spread the walk over every company it touches). The
    strongest chains (each hop's relevance multiplied along the path) are followed past the walk's
    rings (``continuing``), up to ``MAX_HOPS``."""

    def __init__(self, question: Question, seeds: dict[str, float]) -> None:
        self.question = question
        self.rest: dict[str, str | None] = dict.fromkeys(seeds)   # None: the question itself
        self.strength: dict[str, float] = dict(seeds)   # how well the path there answers (a vector seed: its weight)
        self.depth: dict[str, int] = dict.fromkeys(seeds, 0)
        self.relevance: dict[str, float] = {}
        self.frontier: list[str] = list(seeds)   # where the next ``judge`` starts
        self.followed: set[str] = set()   # chain ends whose edges were fetched beyond the rings
        self.answers: list[str] = []   # beyond the rings, each followed chain's best next fact

    def judge(self, facts: dict[str, tuple[tuple[str, ...], str, str, int]], judge: Judge) -> None:
        """Judge ``facts``' edges from the frontier, the strongest path first (best-first, not ring by
        ring): an entity keeps the strongest path that reaches it, and its edges are judged by what
        that path left unanswered. A weak vector seed's neighbour is not claimed for good by the seed
        when the named entity's chain reaches it a hop later. Edges no path reaches are judged by the
        question."""
        touching: dict[str, list[str]] = {}
        for pair in facts:
            for key in split_pair(pair):
                touching.setdefault(key, []).append(pair)
        heap = [(-self.strength[key], key) for key in dict.fromkeys(self.frontier) if key in touching]
        heapq.heapify(heap)
        expanded: set[str] = set()
        while heap:
            strength, here = heapq.heappop(heap)
            if here in expanded or -strength < self.strength[here]:
                continue   # expanded already, or reached since by a stronger path (queued again)
            expanded.add(here)
            group = [pair for pair in touching[here] if pair not in self.relevance]
            if not group:
                continue
            self.relevance.update(judge(self.rest[here], group))
            for pair in group:
                there = next((key for key in split_pair(pair) if key != here), here)
                reach = self.strength[here] * hop_confidence(self.relevance[pair], len(touching[here]))
                if there == here or there in expanded or reach <= self.strength.get(there, 0.0):
                    continue
                asked = self.rest[here]
                self.rest[there] = left_after(self.question.asked if asked is None else asked, tuple(facts[pair][0]))
                self.depth[there], self.strength[there] = self.depth[here] + 1, reach
                if there in touching:
                    heapq.heappush(heap, (-reach, there))
        missed = [pair for pair in facts if pair not in self.relevance]
        if missed:
            self.relevance.update(judge(None, missed))

    def onward(self, here: str, pair: str) -> bool:
        """Whether edge ``pair`` leads on from ``here`` (to an entity no nearer the seeds), not back."""
        there = next((key for key in split_pair(pair) if key != here), here)
        return there != here and self.depth.get(there, MAX_HOPS) > self.depth[here]

    def continuing(self, beam: int) -> list[str]:
        """The ``beam`` strongest ends of chains at or past the walk's rings that still have words to
        answer, below ``MAX_HOPS`` and not followed yet: where the walk goes one hop further."""
        ends = [key for key, depth in self.depth.items() if HOPS <= depth < MAX_HOPS and key not in self.followed
                and (self.rest[key] or "").strip()]
        chosen = sorted(ends, key=lambda k: (-self.strength[k], k))[:beam]
        return chosen


def judge_edges(store: RetrievalReads, question: Question,
                facts: dict[str, tuple[tuple[str, ...], str, str, int]]) -> Judge:
    """Edges' relevance (``edge_relevance``) by the words given (None: the question's), their
    cosines read once for the batch."""
    similarity = edge_cosines(store, question, facts)
    named = tuple(linked_keys(store, question))

    def judge(asked: str | None, group: list[str]) -> dict[str, float]:
        if asked is not None and not asked.strip():
            return dict.fromkeys(group, 0.0)   # the path answered every word: nothing further is asked for
        return edge_relevance(store, question, {pair: facts[pair] for pair in group}, asked=asked,
                              similarity=similarity, named=named)
    return judge


def walk_edges(store: RetrievalReads, question: Question, seeds: dict[str, float],
               chains: Chains) -> list[tuple[str, str]]:
    """The walk's edges: the seeds' neighbourhood up to ``HOPS`` away, then, ring by ring up to
    ``MAX_HOPS``, the edges of the strongest chains' ends (``Chains.continuing``); all judged."""
    edges = store.neighbourhood_sync(seeds, hops=HOPS, cap=CAP, edge_cap=EDGE_CAP)
    keys = list(dict.fromkeys(pair_key(source, target) for source, target in edges))
    facts = store.edge_facts_sync(keys)
    chains.judge(facts, judge_edges(store, question, facts))
    seen = set(keys)
    for _ in range(MAX_HOPS - HOPS):
        ends = chains.continuing(BEAM)
        if not ends:
            break
        chains.followed.update(ends)
        incident = store.incident_pairs_sync(ends)
        more = [pair for pair in incident if pair not in seen][:BEAM_EDGES]
        if more:
            seen.update(more)
            facts = store.edge_facts_sync(more)
            chains.frontier = ends
            chains.judge(facts, judge_edges(store, question, facts))
            edges += [split_pair(pair) for pair in more]
        touching: dict[str, list[str]] = {}   # each end's incident edges, in their order (split once)
        for pair in incident:
            for key in dict.fromkeys(split_pair(pair)):
                touching.setdefault(key, []).append(pair)
        for end in ends:   # each chain's next fact: the end's onward edge that answers the most of what is left
            # (onward from it, whether just fetched or already in the rings: reached from another seed)
            onward = [pair for pair in touching.get(end, ()) if chains.relevance.get(pair, 0.0) > 0
                      and chains.onward(end, pair)]
            if onward:
                chains.answers.append(max(onward, key=lambda pair: chains.relevance[pair]))
        if not more:
            break
    return edges


class ExpansionChannel:
    name = "expansion"
    vector = "query"   # seeds come from names and the question's own vector: keywords are not needed

    def enabled(self, params: QueryParams) -> bool:
        return params.expansion == "ppr"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        seeds = seeds_of(store, question)
        if not seeds:
            return Found()
        chains = Chains(question, seeds)
        edges = walk_edges(store, question, seeds, chains)
        relevance = chains.relevance
        weights = [EDGE_FLOOR + relevance.get(pair_key(source, target), 0.0) for source, target in edges]
        ranked = dict(store.pagerank_sync(seeds, edges, weights, damping=DAMPING, limit=params.top_k))
        # a chain's fact beyond the rings carries little of the walk: it comes with its entities anyway
        floor = min(ranked.values(), default=0.0)
        for pair in chains.answers:
            for key in split_pair(pair):
                ranked.setdefault(key, floor)
        entities = search.scored_entities(store, ranked)
        return Found(entities, self.joining(store, question, ranked, relevance, chains.answers))

    def joining(self, store: RetrievalReads, question: Question, ranked: dict[str, float],
                relevance: dict[str, float], answers: tuple[str, ...] | list[str] = ()) -> list[FoundRelation]:
        """The relations between two of the ranked entities, by the walk's flow along them: each
        endpoint's PageRank times the edge's share of that endpoint's weighed edges (the weights
        kept from the walk): the seed's edge to the bridge, then the bridge's asked-for fact, not a
        hub's many others. Only the best ``top_k`` are read, and the chains' facts beyond the rings
        (``answers``), which carry little of the walk.
        (Discounting each kind's later relations was measured: it cost 2-hop and list recall.)"""
        pairs = store.pairs_among_sync(list(ranked))
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
        chosen = [pairs[i] for i in sorted(best)]
        chosen += [pair for pair in dict.fromkeys(answers) if pair in score and pair not in chosen]
        relations = list(search.relations_by_pairs(store, chosen).values())
        search.set_relation_degrees(store, relations)
        for relation in relations:
            relation.score = score[relation.pair]
        return sorted(relations, key=lambda r: (-r.score, -r.degree, -r.weight))
