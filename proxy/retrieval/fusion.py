"""Fusion: the channels' lists merged into one without duplicates, by the ``fusion`` knob:

    roundrobin  each list's first item, then each list's second... (the first channel's leads a round)
    rrf         reciprocal rank fusion (seed 004, k = 60): an item scores sum(1 / (k + rank)) over the
                lists holding it, so an item several channels found rises above one only one found

then the chunk lists' hits read into chunks (blocking reads).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, TypeVar

from proxy.retrieval.found import (
    ChunkHit,
    Found,
    FoundChunk,
    FoundEntity,
    FoundRelation,
)
from proxy.retrieval.select import round_robin

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

T = TypeVar("T")

RRF_K = 60  # Cormack et al.'s constant, as seed 004 and most hybrid search engines use it


def reciprocal_rank(lists: Sequence[Sequence[T]], key: Callable[[T], Hashable], k: int = RRF_K) -> list[T]:
    """The lists fused by reciprocal rank, best first. Each item is the one met first (at its best
    rank, earlier list first); a duplicate inside one list counts once. Equal scores keep
    round-robin's order, so lists that share nothing fuse exactly as round-robin does."""
    scores: dict[Hashable, float] = {}
    first: dict[Hashable, tuple[int, int, T]] = {}  # (rank, list, item) where round-robin meets it
    for number, items in enumerate(lists):
        counted: set[Hashable] = set()
        for rank, item in enumerate(items):
            name = key(item)
            if name in counted:
                continue
            counted.add(name)
            scores[name] = scores.get(name, 0.0) + 1.0 / (k + rank + 1)
            if name not in first or (rank, number) < first[name][:2]:
                first[name] = (rank, number, item)
    order = sorted(scores, key=lambda name: (-scores[name], first[name][0], first[name][1]))
    return [first[name][2] for name in order]


FUSIONS = ("roundrobin", "rrf")  # the ``fusion`` knob's choices


def fuse(lists: Sequence[Sequence[T]], key: Callable[[T], Hashable], method: str) -> list[T]:
    """The lists as one by ``method``, one of ``FUSIONS``."""
    if method == "rrf":
        return reciprocal_rank(lists, key)
    if method == "roundrobin":
        return round_robin(lists, key)
    raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, not {method!r}")


def fuse_graph(finds: list[Found], method: str = "roundrobin") -> tuple[list[FoundEntity], list[FoundRelation]]:
    return (fuse([f.entities for f in finds], lambda e: e.key, method),
            fuse([f.relations for f in finds], lambda r: r.pair, method))


def fuse_chunks(lists: list[list[ChunkHit]], count: int, method: str = "roundrobin") -> list[ChunkHit]:
    """Any number of chunk lists as one, at most ``count`` long."""
    return fuse(lists, lambda hit: hit.id, method)[:count]


def read_chunks(store: RetrievalReads, hits: list[ChunkHit]) -> list[FoundChunk]:
    """The hits' texts and documents; a chunk deleted since it was found is left out."""
    keys = store.chunk_keys_sync([hit.id for hit in hits])
    texts = store.chunk_texts_sync(list(keys.values()))
    documents = store.chunk_documents_sync([hit.id for hit in hits])
    return [FoundChunk(hit.id, texts[hit.id][0], texts[hit.id][1], hit.score, hit.origin, documents.get(hit.id, []))
            for hit in hits if hit.id in texts]
