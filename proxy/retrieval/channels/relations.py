"""The relation channel (LightRAG's global search): the high-level keywords against the relation
index, most central first, then their endpoint entities."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import Found
from proxy.retrieval.select import rank_relations, scored
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads


class RelationChannel:
    name = "relations"
    vector = "high"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        matches = search.vector_search(store, "relations", question.vectors[self.vector], params.top_k,
                                       params.cosine_threshold)
        relations = scored(matches, search.relations_by_keys(store, [k for k, _ in matches]))
        search.set_relation_degrees(store, relations)
        relations = rank_relations(relations, lambda r: r.degree, lambda r: r.weight)
        endpoint_keys = list(dict.fromkeys(k for r in relations for k in (r.source, r.target)))
        found = search.entities_by_name(store, endpoint_keys)
        degree = store.degrees_sync(list(found))
        entities = []
        for key in endpoint_keys:
            if key in found:
                found[key].degree = degree[key]
                entities.append(found[key])
        return Found(entities, relations)
