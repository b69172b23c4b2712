"""The described-entities channel: a question that names no entity ("which firms are active in the
aviation sector?", "which printing companies were founded before 1880?") asks for the entities its
words describe. They are found by its words (and themes) in the entities' names and descriptions,
through the store's BM25 index of entities (built on its first use; the chunks' and relations'
indexes are not), best first: a word weighs by its rarity in the whole store, so "aviation" (a few
descriptions) decides and "firm" (most of them) does not. Among the entities the vector channels
find, the asked word is common (they were found by it), so their own order cannot tell them apart.

It runs in local, hybrid and mix mode when the ``linking`` knob is on (the name index says whether
the question, or a follow-up's earlier turns, names an entity); the evidence layout puts its
entities first when nothing is named (``evidence_rank.rank_entities``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.channels.linked import linked_keys
from proxy.retrieval.found import Found, FoundEntity
from proxy.retrieval.params import QueryParams
from proxy.retrieval.select import scored
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads


class DescribedChannel:
    name = "described"
    vector = "query"   # it searches no vector index; the question's own vector is always there

    def enabled(self, params: QueryParams) -> bool:
        return params.linking == "on"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        if linked_keys(store, question):   # a named entity: the linked channel and the walk ground it
            return Found()
        matches = store.keyword_search_sync("entities", question.asked, question.params.top_k)
        entities: list[FoundEntity] = scored(matches, search.entities_by_keys(store, [k for k, _ in matches]))
        degree = store.degrees_sync([e.key for e in entities])
        for entity in entities:
            entity.degree = degree[entity.key]
        return Found(entities)
