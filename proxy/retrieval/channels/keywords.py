"""The keyword channel: the question's words against the store's BM25 indexes (chunk texts, entity
names and descriptions, relation keywords, endpoints and descriptions), best first. Names, codes
and identifiers ("ERR-4711") that an embedding blurs are matched word for word. It runs when the
``keyword_search`` knob is on: chunks in mix and naive, entities in local, hybrid and mix,
relations in global, hybrid and mix (the modes' own meaning)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.core.modes import Mode
from proxy.retrieval import search
from proxy.retrieval.found import ChunkHit, Found, FoundEntity, FoundRelation
from proxy.retrieval.params import QueryParams
from proxy.retrieval.select import scored
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

CHUNK_MODES = frozenset({Mode.MIX, Mode.NAIVE})
ENTITY_MODES = frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})
RELATION_MODES = frozenset({Mode.GLOBAL, Mode.HYBRID, Mode.MIX})
MODES = CHUNK_MODES | ENTITY_MODES | RELATION_MODES


class KeywordChannel:
    name = "keyword_search"   # the knob's name: "keywords" is the model's keyword call
    vector = "query"   # it searches no vector index; the question's own vector is always there

    def enabled(self, params: QueryParams) -> bool:
        return params.keyword_search == "on"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params, mode = question.params, Mode(question.params.mode)
        found = Found()
        if mode in CHUNK_MODES:
            matches = store.keyword_search_sync("chunks", question.text, params.chunk_top_k)
            ids = store.chunk_ids_sync([k for k, _ in matches])
            found.chunks = [ChunkHit(ids[k], score, "keyword") for k, score in matches if k in ids]
        if mode in ENTITY_MODES:
            found.entities = self._entities(store, question.text, params.top_k)
        if mode in RELATION_MODES:
            found.relations = self._relations(store, question.text, params.top_k)
        return found

    @staticmethod
    def _entities(store: RetrievalReads, text: str, count: int) -> list[FoundEntity]:
        matches = store.keyword_search_sync("entities", text, count)
        entities: list[FoundEntity] = scored(matches, search.entities_by_keys(store, [k for k, _ in matches]))
        degree = store.degrees_sync([e.key for e in entities])
        for entity in entities:
            entity.degree = degree[entity.key]
        return entities

    @staticmethod
    def _relations(store: RetrievalReads, text: str, count: int) -> list[FoundRelation]:
        matches = store.keyword_search_sync("relations", text, count)
        relations: list[FoundRelation] = scored(matches, search.relations_by_keys(store, [k for k, _ in matches]))
        search.set_relation_degrees(store, relations)
        return relations
