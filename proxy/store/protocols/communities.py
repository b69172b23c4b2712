"""The community summaries' table: what the summary job compares a new partition with, and what
the community channel reads for the few communities a question finds. Writes go through the
store's changesets (``communities_upserted`` / ``communities_removed``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StoredCommunity:
    id: str
    key: int             # vector key
    title: str
    summary: str
    members: tuple[str, ...]   # member entity keys, most central first


class CommunityTables(Protocol):
    def digests_sync(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Community id -> (the digest of what its summary was written from, its members), for
        every community."""
        ...

    def by_keys_sync(self, keys: list[int]) -> dict[int, StoredCommunity]:
        """The communities with these vector keys, by key."""
        ...
