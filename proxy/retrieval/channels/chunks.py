"""The chunk channel (LightRAG's naive search, part of mix): the question itself against the chunk index."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import ChunkHit, Found
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads


class ChunkChannel:
    name = "chunks"
    vector = "query"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        matches = search.vector_search(store, "chunks", question.vectors[self.vector], params.chunk_top_k,
                                       params.cosine_threshold)
        ids = store.chunk_ids_sync([k for k, _ in matches])
        return Found(chunks=[ChunkHit(ids[k], score, "vector") for k, score in matches if k in ids])
