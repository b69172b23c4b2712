"""The community channel (seed 003: global = relations + community summaries): the question's
high-level keywords against the community summaries' vector index (Leiden communities of the
graph, each summarised by the extraction model: proxy/knowledge/communities.py). It runs in
global, hybrid and mix when the ``communities`` knob is on, and finds a few communities, best
first: their title, summary and members (most central first) in ``Found.communities``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import Found, FoundCommunity
from proxy.retrieval.params import QueryParams
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

MOST = 5   # communities a question gets at most: each summary is a paragraph of the context


class CommunityChannel:
    name = "communities"
    vector = "high"

    def enabled(self, params: QueryParams) -> bool:
        return params.communities == "on"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        matches = search.vector_search(store, "communities", question.vectors[self.vector],
                                       min(MOST, params.top_k), params.cosine_threshold)
        stored = store.community_rows_sync([key for key, _ in matches])
        return Found(communities=[
            FoundCommunity(c.id, c.title, c.summary, list(c.members), score)
            for key, score in matches if (c := stored.get(key)) is not None])
