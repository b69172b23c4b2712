"""A changeset: everything one pipeline step commits at once, in all three stores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proxy.core.llm_cache import CacheEntry


@dataclass
class ChunkRow:
    id: str
    content: str
    tokens: int
    embedding: np.ndarray
    key: int = 0  # assigned at commit


@dataclass
class EntityRow:
    name_key: str
    name: str
    type: str
    description: str
    source_ids: list[str]
    embed_hash: str
    embedding: np.ndarray
    key: int = 0  # 0: a new key is assigned at commit (new or re-embedded)


@dataclass
class RelationRow:
    pair_key: str
    source: str
    target: str
    keywords: list[str]
    description: str
    weight: float
    source_ids: list[str]
    embed_hash: str
    embedding: np.ndarray
    key: int = 0


@dataclass
class CommunityRow:
    """A community of the graph and its summary (``proxy/knowledge/communities.py`` writes them)."""
    id: str                  # hash of the sorted member keys
    title: str
    summary: str
    members: list[str]       # member entity keys, most central first
    digest: str              # hash of what the summary was written from
    embedding: np.ndarray
    key: int = 0             # assigned at commit


@dataclass
class DocumentUpdate:
    id: str
    status: str
    error: str | None = None
    chunks_total: int | None = None
    chunks_done: int | None = None


@dataclass
class EntityEdit:
    """An entity's fields set by hand (None: as recomputed)."""
    name: str | None = None
    type: str | None = None
    description: str | None = None


@dataclass
class RelationEdit:
    keywords: list[str] | None = None
    description: str | None = None
    weight: float | None = None


@dataclass
class Curation:
    """Curation's bookkeeping, committed with the graph rows it changed: aliases (a merged-away
    name keeps resolving to its target) and hand edits (laid over every later recomputation)."""
    aliases: dict[str, str] = field(default_factory=dict)                # alias key -> target key
    # alias key -> (reason, evidence) of an alias entity resolution made (none: merged by hand)
    resolved: dict[str, tuple[str, str]] = field(default_factory=dict)
    aliases_dropped: list[str] = field(default_factory=list)             # alias keys no longer aliases
    aliases_into_dropped: list[str] = field(default_factory=list)        # targets losing all their aliases
    # targets losing the aliases entity resolution made (they went with their documents; the same
    # evidence makes them again): a merge by hand outlives its documents, resolution's do not
    resolved_into_dropped: list[str] = field(default_factory=list)
    entity_edits: dict[str, EntityEdit] = field(default_factory=dict)    # by name key
    relation_edits: dict[str, RelationEdit] = field(default_factory=dict)  # by pair key
    entity_edits_dropped: list[str] = field(default_factory=list)
    relation_edits_dropped: list[str] = field(default_factory=list)


@dataclass
class Changeset:
    chunks_added: list[ChunkRow] = field(default_factory=list)
    chunks_removed: list[str] = field(default_factory=list)
    links_added: list[tuple[str, str, int]] = field(default_factory=list)  # document, chunk, order
    documents_removed: list[str] = field(default_factory=list)
    entities_upserted: list[EntityRow] = field(default_factory=list)
    entities_removed: list[str] = field(default_factory=list)            # name keys
    relations_upserted: list[RelationRow] = field(default_factory=list)
    relations_removed: list[str] = field(default_factory=list)           # pair keys
    documents: list[DocumentUpdate] = field(default_factory=list)
    communities_upserted: list[CommunityRow] = field(default_factory=list)
    communities_removed: list[str] = field(default_factory=list)        # community ids
    curation: Curation = field(default_factory=Curation)
    cache_entries: list[CacheEntry] = field(default_factory=list)  # LLM replies the changes were made with
    embed_model: str | None = None  # recorded as the model the stored vectors come from
    # more statements for the same transaction (cache entries, for instance): fn(connection)
    also: list[Callable[[Any], None]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not any((self.chunks_added, self.chunks_removed, self.links_added, self.documents_removed,
                        self.entities_upserted, self.entities_removed, self.relations_upserted,
                        self.relations_removed, self.documents, self.communities_upserted,
                        self.communities_removed))


def pair_key(a: str, b: str) -> str:
    first, second = sorted((a, b))
    return f"{first}\x1f{second}"


def split_pair(key: str) -> tuple[str, str]:
    first, second = key.split("\x1f", 1)
    return first, second


@dataclass
class IndexDelta:
    """What a commit did to one vector index: keys added (with their vectors) and removed."""

    added_keys: list[int] = field(default_factory=list)
    added_vectors: list[np.ndarray] = field(default_factory=list)
    removed_keys: list[int] = field(default_factory=list)
    linked_chunks: dict[str, list[str]] = field(default_factory=dict)  # chunks of removed documents
