"""What a retrieval finds: entities, relations and chunks, as plain records the stages pass on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class FoundEntity:
    key: str
    name: str
    type: str
    source_ids: Sequence[str]   # the store's own tuple, not copied: a hub's lists run to hundreds
    vector_key: int
    description: str = ""  # read for the candidates only, once they are chosen (``fill_descriptions``)
    score: float = 0.0
    degree: int = 0
    channels: list[str] = field(default_factory=list)   # the channels that found it (set by the fusion)


@dataclass
class FoundRelation:
    pair: str
    source: str          # entity keys
    target: str
    source_name: str
    target_name: str
    keywords: list[str]
    weight: float
    source_ids: Sequence[str]   # the store's own tuple, not copied
    vector_key: int
    description: str = ""
    score: float = 0.0
    degree: int = 0      # degree(source) + degree(target): how central the edge is
    channels: list[str] = field(default_factory=list)   # the channels that found it (set by the fusion)


@dataclass(frozen=True)
class ChunkHit:
    """A chunk a channel (or a graph item's sources) proposes, before its text is read."""
    id: str
    score: float = 0.0
    origin: str = "vector"           # the list it came from: vector | entity | relation | ...


@dataclass
class FoundChunk:
    id: str
    content: str
    tokens: int
    score: float = 0.0
    origin: str = "vector"           # vector | entity | relation
    documents: list[str] = field(default_factory=list)
    rerank_score: float | None = None  # the re-ranking server's score, when one re-ranked the chunks


@dataclass
class FoundCommunity:
    """A community of the graph (Leiden) and its summary, written by the extraction model."""
    key: str
    title: str
    summary: str
    entities: list[str] = field(default_factory=list)   # member entity keys, most central first
    score: float = 0.0


@dataclass
class Found:
    """One channel's finds, each list best first."""
    entities: list[FoundEntity] = field(default_factory=list)
    relations: list[FoundRelation] = field(default_factory=list)
    chunks: list[ChunkHit] = field(default_factory=list)
    communities: list[FoundCommunity] = field(default_factory=list)
