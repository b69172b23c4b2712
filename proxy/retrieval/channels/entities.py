"""The entity channel (LightRAG's local search): the low-level keywords against the entity index,
then the chosen entities' edges, most central first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import Found
from proxy.retrieval.select import scored
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads


class EntityChannel:
    name = "entities"
    vector = "low"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        matches = search.vector_search(store, "entities", question.vectors[self.vector], params.top_k,
                                       params.cosine_threshold)
        entities = scored(matches, search.entities_by_keys(store, [k for k, _ in matches]))
        degree = store.degrees_sync([e.key for e in entities])
        for entity in entities:
            entity.degree = degree[entity.key]
        return Found(entities, search.central_incident_relations(store, [e.key for e in entities], params.top_k))
