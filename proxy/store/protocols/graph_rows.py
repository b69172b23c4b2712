"""The graph's tables by subject: entity and relation rows, the extraction results they are
recomputed from, aliases (merged-away names), hand edits, dismissed merge suggestions, and the
console's entity queries. Backend-neutral: plain data in and out, never a cursor.

Curation's writes (aliases, hand edits) ride in a commit (``Changeset.curation``), so they are
not methods here; only a dismissed suggestion is written on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from proxy.store.changes import EntityEdit, RelationEdit

Subject = Literal["entities", "relations"]


@dataclass
class StoredEntity:
    """An entity row as curation reads it (descriptions included)."""
    name: str
    type: str
    description: str
    source_ids: list[str]


@dataclass
class StoredRelation:
    """A relation's endpoints and sources, by pair key."""
    pair: str
    source: str
    target: str
    source_ids: list[str]


@dataclass
class StoredRow:
    """What a recomputation needs of a stored entity or relation row (its vector is read later,
    and only when the row's text did not change)."""
    name: str  # "" for a relation
    source_ids: list[str]
    key: int
    embed_hash: str


@dataclass
class StoredEdits:
    entities: dict[str, EntityEdit]     # by name key
    relations: dict[str, RelationEdit]  # by pair key


class GraphRows(Protocol):
    # --- recomputing the graph (ingestion and curation) ---

    async def aliases(self) -> dict[str, str]:
        """Every merged-away name key and the key it resolves to."""
        ...

    def aliases_sync(self) -> dict[str, str]:
        """``aliases``, blocking: the store's name index is built from them at start-up."""
        ...

    async def touched_by(self, chunk_ids: list[str]) -> tuple[set[str], set[str]]:
        """Entity keys and pair keys citing any of ``chunk_ids``."""
        ...

    async def stored_rows(self, subject: Subject, keys: list[str]) -> dict[str, StoredRow]: ...

    async def embeddings(self, subject: Subject, keys: list[str]) -> np.ndarray:
        """The rows' embeddings, one row each, in the order of the sorted keys."""
        ...

    async def extractions(self, chunk_ids: list[str]) -> dict[str, str]:
        """The stored extraction results (JSON) of the chunks that have one."""
        ...

    async def edits(self, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits: ...

    # --- curation ---

    async def entities(self, keys: list[str]) -> dict[str, StoredEntity]: ...

    async def relations_touching(self, keys: list[str]) -> list[StoredRelation]:
        """Relations with an endpoint among ``keys``, by pair key."""
        ...

    async def relation(self, pair: str) -> StoredRelation | None: ...

    def dismissed_sync(self) -> set[str]:
        """Pair keys of dismissed merge suggestions (blocking: suggestions run in a worker thread)."""
        ...

    async def dismiss(self, pair: str) -> None: ...

    # --- the console's and the API's entity queries ---

    async def alias_target(self, key: str) -> str | None: ...

    async def resolve_name(self, key: str) -> str | None:
        """The entity key for a name as extracted: itself, or what it was merged into."""
        ...

    async def matching_keys(self, search: str, kind: str) -> list[str]:
        """Entity keys whose name contains ``search`` (any case) and whose type is ``kind`` (if given)."""
        ...

    async def names_page(self, search: str, kind: str, descending: bool, limit: int,
                         offset: int) -> tuple[list[str], int]:
        """One page of matching entity keys by name, and how many match."""
        ...

    async def entity_types(self) -> list[tuple[str, int]]: ...

    async def entity_detail(self, key: str, shown_chunks: int) -> dict[str, Any] | None:
        """An entity's page: its row, the documents citing it, its first chunks, aliases, edited?"""
        ...

    async def descriptions(self, subject: Subject, wanted: list[tuple[int, str]]) -> dict[int, str]:
        """Descriptions by vector key for (vector key, name or pair key) pairs."""
        ...
