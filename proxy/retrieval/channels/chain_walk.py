"""The chain walk channel: the expansion's chains without its rings (the light path's expansion,
``expansion=chains``). From the question's seed entities (the ones it names, the ones nearest its
vector), a hop at a time up to ``MAX_HOPS``: the ``BEAM`` strongest chain ends have their incident
relations judged by what the path there left unanswered (``Chains``, as the full expansion judges
them), and the entities those relations reach become the next hop's ends. The relations come out
ranked by how strongly a chain reaches along them, each end's best onward one surely kept; their
entities come with them.

The full expansion (``ppr``) weighs every edge two rings around the seeds (up to 2,000 entities on
a dense graph), ranks them by a personalised PageRank and joins the best. That is half a turn's
CPU. A 2- or 3-hop question needs only the chain that answers it, and the per-commit incident lists
(``KnowledgeStore.incident_sync``) hand each end's relations over without walking the graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.channels.expansion import MAX_HOPS, Chains, judge_edges, seeds_of
from proxy.retrieval.found import Found, FoundEntity, FoundRelation
from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import hop_confidence
from proxy.retrieval.stages import Question
from proxy.store.changes import split_pair

if TYPE_CHECKING:
    from proxy.store.incident import Incident
    from proxy.store.store import KnowledgeStore

BEAM = 4   # chain ends followed each hop, the strongest first

Facts = dict[str, tuple[tuple[str, ...], str, str, int]]


def facts_of(incident: list[Incident]) -> Facts:
    """What judging an edge needs (``search.edge_facts``' shape), from the incident lists."""
    return {i.meta.pair: (tuple(i.meta.keywords), i.source_name, i.target_name, i.meta.key) for i in incident}


class ChainWalk:
    """One question's walk: the chains (``Chains``), and how strongly each judged relation is reached
    (the near end's strength times the hop's confidence)."""

    def __init__(self, store: KnowledgeStore, question: Question, seeds: dict[str, float]) -> None:
        self.store, self.question = store, question
        self.chains = Chains(question, seeds)
        self.reached: dict[str, float] = {}
        self.found: dict[str, Incident] = {}

    def run(self) -> None:
        chains = self.chains
        ends = self.strongest([key for key, depth in chains.depth.items() if depth == 0])
        for hop in range(MAX_HOPS):
            if not ends:
                break
            incident = [i for i in self.store.incident_sync(ends) if i.meta.pair not in self.found]
            touching: dict[str, list[str]] = {}
            for item in incident:
                self.found[item.meta.pair] = item
                for key in dict.fromkeys((item.meta.source, item.meta.target)):
                    touching.setdefault(key, []).append(item.meta.pair)
            facts = facts_of(incident)
            chains.frontier = ends
            chains.judge(facts, judge_edges(self.store, self.question, facts))
            for end in ends:
                pairs = touching.get(end, [])
                for pair in pairs:
                    reach = chains.strength[end] * hop_confidence(chains.relevance.get(pair, 0.0), len(pairs))
                    self.reached[pair] = max(self.reached.get(pair, 0.0), reach)
                onward = [pair for pair in pairs if chains.relevance.get(pair, 0.0) > 0 and chains.onward(end, pair)]
                if onward:
                    chains.answers.append(max(onward, key=lambda pair: chains.relevance[pair]))
            ends = self.strongest([key for key, depth in chains.depth.items() if depth == hop + 1
                                   and (chains.rest[key] or "").strip()])

    def strongest(self, keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda k: (-self.chains.strength[k], k))[:BEAM]

    def relations(self, count: int) -> list[FoundRelation]:
        """The ``count`` relations reached most strongly, and every chain's best next fact."""
        ranked = sorted(self.reached, key=lambda pair: -self.reached[pair])
        chosen = list(dict.fromkeys(ranked[:count] + [p for p in self.chains.answers if p in self.found]))
        relations = []
        for pair in chosen:
            item = self.found[pair]
            relation = search.found_relation(item.meta, item.source_name, item.target_name, item.central)
            relation.score = self.reached.get(pair, 0.0)
            relations.append(relation)
        return sorted(relations, key=lambda r: (-r.score, -r.degree, -r.weight))

    def entity_strengths(self, relations: list[FoundRelation]) -> dict[str, float]:
        """The seeds, then the entities the chosen relations join, the strongest first."""
        keys = dict.fromkeys([k for k, depth in self.chains.depth.items() if depth == 0]
                             + [key for r in relations for key in split_pair(r.pair)])
        strength = self.chains.strength
        return {key: strength.get(key, 0.0) for key in sorted(keys, key=lambda k: -strength.get(k, 0.0))}


class ChainWalkChannel:
    name = "chains"
    vector = "query"   # seeds come from names and the question's own vector: keywords are not needed

    def enabled(self, params: QueryParams) -> bool:
        return params.expansion == "chains"

    def search(self, store: KnowledgeStore, question: Question) -> Found:
        seeds = seeds_of(store, question)
        if not seeds:
            return Found()
        walk = ChainWalk(store, question, seeds)
        walk.run()
        relations = walk.relations(question.params.top_k)
        strengths = walk.entity_strengths(relations)
        found = search.entities_by_name(store, list(strengths))
        entities: list[FoundEntity] = []
        for key, strength in strengths.items():
            if key in found:
                entity = found[key]
                entity.score = strength
                entities.append(entity)
        degree = search.degrees(store, [e.key for e in entities])
        for entity in entities:
            entity.degree = degree[entity.key]
        return Found(entities[:question.params.top_k], relations)
