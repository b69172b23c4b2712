"""The LLM cache's tables: every structured model reply (extraction, summary, keywords, answer) by
kind and key, with its request and how often it was answered again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.llm_cache import CACHE_KINDS, CacheEntry
from proxy.store.protocols.batches import GroupedReads, GroupedWrites

__all__ = ["CACHE_KINDS", "CacheEntry", "CacheTables", "KindTotals"]


@dataclass(frozen=True)
class KindTotals:
    count: int
    size: int  # characters of request and response
    hits: int


class CacheTables(Protocol):
    async def totals(self) -> dict[str, KindTotals]:
        """Count, size and hits of each kind that has entries."""
        ...

    async def entries(self, kind: str, search: str | None, limit: int,
                      offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of ``kind``'s entries, newest first (key, model, hits, kb_version, created_at,
        last_hit_at, size), and how many match: ``search`` is a case-insensitive substring of the
        key, model, request or response, taken literally (None: every entry)."""
        ...

    async def entry(self, kind: str, key: str) -> dict[str, Any] | None:
        """One entry's columns as ``entries`` gives them, with its request and response."""
        ...

    async def count(self, kind: str) -> int: ...

    async def delete(self, kind: str, key: str) -> None:
        """Nothing happens when the entry is already gone."""
        ...

    async def clear(self, kind: str) -> None: ...

    def writer(self, max_delay: float) -> GroupedWrites[CacheEntry]:
        """New entries kept (an entry already stored is left as it is), batched over ``max_delay`` seconds."""
        ...

    def reader(self) -> GroupedReads[tuple[str, str], str]:
        """The stored response of a (kind, key), lookups made together sharing one query."""
        ...
