"""Fusion: the channels' lists merged round-robin without duplicates, the first channel's item
leading each round; then the chunk lists' hits read into chunks (blocking reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import (
    ChunkHit,
    Found,
    FoundChunk,
    FoundEntity,
    FoundRelation,
)
from proxy.retrieval.select import round_robin

if TYPE_CHECKING:
    from proxy.store.store import KnowledgeStore


def fuse_graph(finds: list[Found]) -> tuple[list[FoundEntity], list[FoundRelation]]:
    return (round_robin([f.entities for f in finds], key=lambda e: e.key),
            round_robin([f.relations for f in finds], key=lambda r: r.pair))


def fuse_chunks(lists: list[list[ChunkHit]], count: int) -> list[ChunkHit]:
    """Any number of chunk lists as one, at most ``count`` long."""
    return round_robin(lists, key=lambda hit: hit.id)[:count]


def read_chunks(store: KnowledgeStore, hits: list[ChunkHit]) -> list[FoundChunk]:
    """The hits' texts and documents; a chunk deleted since it was found is left out."""
    keys = search.chunk_keys(store, [hit.id for hit in hits])
    texts = search.chunk_texts(store, list(keys.values()))
    documents = search.documents_of(store, [hit.id for hit in hits])
    return [FoundChunk(hit.id, texts[hit.id][0], texts[hit.id][1], hit.score, hit.origin, documents.get(hit.id, []))
            for hit in hits if hit.id in texts]
