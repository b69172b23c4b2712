"""The LLM cache as the knowledge service offers it (``knowledge.cache``): lookups and new entries
for the model calls, and the console's view of it (kinds, entries, deleting, clearing)."""

from __future__ import annotations

from typing import Any

from anyio.abc import TaskGroup

from proxy.knowledge.bookkeeping import write_in_background
from proxy.store.protocols.cache import CACHE_KINDS, CacheEntry, CacheTables, KindTotals

# new entries wait this long for others to share their commit (they are off every caller's path)
WRITE_DELAY = 0.2


class CacheService:
    def __init__(self, tables: CacheTables) -> None:
        self.tables = tables
        self.writer = tables.writer(WRITE_DELAY)
        self._reader = tables.reader()
        self._group: TaskGroup | None = None

    def start(self, group: TaskGroup) -> None:
        """Commit new entries from now on, in ``group`` (cancelled at shutdown)."""
        self._group = group
        group.start_soon(self.writer.run)

    # --- for the model calls ---

    async def lookup(self, kind: str, key: str) -> str | None:
        """The cached response, or None; lookups made in the same moment share one query."""
        return await self._reader.get((kind, key))

    def remember(self, entry: CacheEntry) -> None:
        """Keep a new entry, in the background."""
        if self._group is None:
            raise RuntimeError("the cache service is not started")
        write_in_background(self._group, self.writer, entry)

    def remember_answer(self, model: str, key: str, request: bytes, response: bytes) -> None:
        self.remember(CacheEntry("answer", key, model, request.decode("utf-8", "replace"),
                                 response.decode("utf-8", "replace")))

    # --- for the console ---

    async def kinds(self) -> dict[str, KindTotals]:
        """Count, size and hits of every kind, in the order of CACHE_KINDS (zeros for an empty kind)."""
        found = await self.tables.totals()
        return {kind: found.get(kind, KindTotals(0, 0, 0)) for kind in CACHE_KINDS}

    async def entries(self, kind: str, search: str | None, limit: int,
                      offset: int) -> tuple[list[dict[str, Any]], int]:
        return await self.tables.entries(kind, search, limit, offset)

    async def entry(self, kind: str, key: str) -> dict[str, Any] | None:
        return await self.tables.entry(kind, key)

    async def count(self, kind: str) -> int:
        return await self.tables.count(kind)

    async def delete(self, kind: str, key: str) -> None:
        await self.tables.delete(kind, key)

    async def clear(self, kind: str) -> None:
        await self.tables.clear(kind)
