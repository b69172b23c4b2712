"""The chain walk channel: the expansion's chains without its rings (the light path's expansion,
``expansion=chains``). From the question's seed entities (the ones it names, the ones nearest its
vector), a hop at a time up to ``HOPS``: the ``BEAM`` strongest chain ends have their incident
relations judged by what the path there left unanswered (as the full expansion judges them, by
their keywords), and the entities those relations reach most strongly become the next hop's ends.
The relations come out ranked by how strongly a chain reaches along them, each end's best onward
one surely kept; their entities come with them.

The full expansion (``ppr``) weighs every edge two rings around the seeds (up to 2,000 entities on
a dense graph) with their vectors too, ranks them by a personalised PageRank and joins the best:
half a turn's CPU. A 2- or 3-hop question needs only the chain that answers it, and the per-commit
incident lists (``RetrievalReads.incident_sync``) hand each end's relations over without walking
the graph. No vector is read (the light path's rule): a relation's words decide.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.channels.expansion import seeds_of
from proxy.retrieval.channels.linked import linked_keys
from proxy.retrieval.found import Found, FoundRelation
from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import edge_relevance, left_after
from proxy.retrieval.stages import Question
from proxy.store.changes import split_pair

if TYPE_CHECKING:
    from proxy.store.incident import Incident
    from proxy.store.protocols.retrieval import RetrievalReads

BEAM = 4   # chain ends followed each hop, the strongest first
HOPS = 3   # a 3-hop question's answer is a relation of the third hop's ends (the PageRank expansion
           # goes a fourth hop; here it cost 2-3 ms a turn and moved no bench)


@dataclass
class Unasked:
    """An end's relations its question's words do not meet: each is reached as weakly as the others
    (``hop_confidence``'s floor, the end's strength over its count), so they are kept as one group
    rather than weighed one by one: a hub has hundreds."""
    end: str
    reach: float
    pairs: list[str]


class ChainWalk:
    """One question's walk: the chain ends' depths, strengths and what is left to ask at each, how
    strongly each relation met is reached (the near end's strength times the hop's confidence,
    ``hop_confidence``), and each end's best onward relation (``answers``)."""

    def __init__(self, store: RetrievalReads, question: Question, seeds: dict[str, float]) -> None:
        self.store, self.question = store, question
        self.named = tuple(linked_keys(store, question))
        self.strength: dict[str, float] = dict(seeds)
        self.depth: dict[str, int] = dict.fromkeys(seeds, 0)
        self.rest: dict[str, str] = dict.fromkeys(seeds, question.asked)   # what is left to ask there
        self.reached: dict[str, float] = {}    # relations the words met -> reach
        self.unasked: list[Unasked] = []
        self.found: dict[str, Incident] = {}
        self.answers: list[str] = []

    def run(self) -> None:
        ends = self.strongest(list(self.depth))
        for hop in range(HOPS):
            if not ends:
                break
            touching: dict[str, list[str]] = {}
            for item in self.store.incident_sync(ends):
                pair = item.meta.pair
                if pair not in self.found:
                    self.found[pair] = item
                    for key in dict.fromkeys((item.meta.source, item.meta.target)):
                        touching.setdefault(key, []).append(pair)
            onward: dict[str, tuple[float, str, str]] = {}   # entity a hop further -> (reach, from, along)
            for end in ends:
                self.judge(end, touching.get(end, []), onward)
            self.unasked_onward(onward, hop)
            ends = self.follow(onward, hop + 1)

    def judge(self, end: str, pairs: list[str], onward: dict[str, tuple[float, str, str]]) -> None:
        """``end``'s relations judged by what is left to ask there; the entities they lead on to
        (none reached before) offered to ``onward``; the best kept as the chain's next fact."""
        if not pairs:
            return
        facts = {}
        for pair in pairs:
            meta = self.found[pair]
            facts[pair] = (tuple(meta.meta.keywords), meta.source_name, meta.target_name, meta.meta.key)
        relevance = edge_relevance(self.store, self.question, facts, asked=self.rest[end], similarity={},
                                   named=self.named)
        strength, floor = self.strength[end], 1.0 / len(pairs)
        best, unasked = None, []
        for pair in pairs:
            score = relevance[pair]
            if score <= 0:
                unasked.append(pair)
                continue
            reach = strength * max(min(1.0, score), floor)
            self.reached[pair] = reach
            there = self.other_end(pair, end)
            if there is not None:
                if reach > onward.get(there, (0.0,))[0]:
                    onward[there] = (reach, end, pair)
                if best is None or score > best[0]:
                    best = (score, pair)
        if best is not None:
            self.answers.append(best[1])
        if unasked:
            self.unasked.append(Unasked(end, strength * floor, unasked))

    def other_end(self, pair: str, here: str) -> str | None:
        """The entity ``pair`` leads to from ``here``, unless a loop or one a chain reached already."""
        there = next((key for key in split_pair(pair) if key != here), here)
        return None if there == here or there in self.depth else there

    def unasked_onward(self, onward: dict[str, tuple[float, str, str]], hop: int) -> None:
        """The relations the words did not meet lead on too, as weakly as their end's floor: a
        product's one relation is its maker's, whatever the question calls it. Only as many as could
        still be among the ``BEAM`` strongest are offered."""
        weakest = heapq.nlargest(BEAM, (reach for reach, _, _ in onward.values()))
        bar = weakest[-1] if len(weakest) == BEAM else 0.0
        for group in self.unasked:
            if self.depth[group.end] != hop or group.reach <= bar:
                continue
            offered = 0
            for pair in group.pairs:
                there = self.other_end(pair, group.end)
                if there is not None and group.reach > onward.get(there, (0.0,))[0]:
                    onward[there] = (group.reach, group.end, pair)
                    offered += 1
                    if offered == BEAM:
                        break

    def follow(self, onward: dict[str, tuple[float, str, str]], depth: int) -> list[str]:
        """The ``BEAM`` entities reached most strongly become the next hop's ends, each with what its
        path leaves to ask (an end whose path answered every word goes no further)."""
        ends = []
        for there in sorted(onward, key=lambda k: (-onward[k][0], k))[:BEAM]:
            reach, here, pair = onward[there]
            left = left_after(self.rest[here], tuple(self.found[pair].meta.keywords))
            self.depth[there], self.strength[there], self.rest[there] = depth, reach, left
            if left.strip():
                ends.append(there)
        return ends

    def strongest(self, keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda k: (-self.strength[k], k))[:BEAM]

    def relations(self, count: int) -> list[FoundRelation]:
        """The ``count`` relations reached most strongly (those the words met, then the groups they
        did not, the strongest ends' first), and every chain's best next fact."""
        reach = dict(self.reached)
        for group in sorted(self.unasked, key=lambda g: -g.reach):
            for pair in group.pairs[:count]:
                reach.setdefault(pair, group.reach)
        ranked = heapq.nsmallest(count, reach, key=lambda pair: -reach[pair])
        relations = []
        for pair in dict.fromkeys(ranked + self.answers):
            item = self.found[pair]
            relation = search.found_relation(item.meta, item.source_name, item.target_name, item.central)
            relation.score = reach[pair]
            relations.append(relation)
        return sorted(relations, key=lambda r: (-r.score, -r.degree, -r.weight))

    def entity_strengths(self, relations: list[FoundRelation]) -> dict[str, float]:
        """The seeds and the entities the chosen relations join, the strongest first: a chain end by
        its path's strength, an entity no chain went on from by the best relation reaching it."""
        strength = {key: value for key, value in self.strength.items() if self.depth[key] == 0}
        for relation in relations:
            for key in split_pair(relation.pair):
                strength[key] = max(strength.get(key, 0.0), self.strength.get(key, relation.score))
        return dict(sorted(strength.items(), key=lambda item: -item[1]))


class ChainWalkChannel:
    name = "chains"
    vector = "query"   # seeds come from names and the question's own vector: keywords are not needed

    def enabled(self, params: QueryParams) -> bool:
        return params.expansion == "chains"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        seeds = seeds_of(store, question)
        if not seeds:
            return Found()
        walk = ChainWalk(store, question, seeds)
        walk.run()
        relations = walk.relations(question.params.top_k)
        entities = search.scored_entities(store, walk.entity_strengths(relations))
        return Found(entities[:question.params.top_k], relations)
