"""The LLM cache as the knowledge service offers it (``knowledge.cache``): lookups and new entries
for the model calls, and the console's view of it (kinds, entries, deleting, clearing)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from anyio.abc import TaskGroup

from proxy.knowledge.bookkeeping import write_in_background
from proxy.store.protocols.cache import CACHE_KINDS, CacheEntry, CacheTables, KindTotals

# new entries wait this long for others to share their commit (they are off every caller's path)
WRITE_DELAY = 0.2
# small replies (a turn's keywords) kept in memory too: DuckDB reads a stored reply by decompressing
# the block of replies around it, ~5 ms beside big extraction replies, on every grounded turn
MEMORY_ENTRIES = 4096
MEMORY_REPLY_CHARS = 4096


class CacheService:
    def __init__(self, tables: CacheTables, *, in_memory: bool = True) -> None:
        """``in_memory``: keep small replies in this process too (not on a store several replicas
        share: one's deletion would not reach the others' memory)."""
        self.tables = tables
        self.writer = tables.writer(WRITE_DELAY)
        self._reader = tables.reader()
        self._group: TaskGroup | None = None
        self._memory: OrderedDict[tuple[str, str], str] | None = OrderedDict() if in_memory else None
        self._erasures = 0   # deletions and clearings so far: a read begun before one keeps nothing

    def start(self, group: TaskGroup) -> None:
        """Commit new entries from now on, in ``group`` (cancelled at shutdown)."""
        self._group = group
        group.start_soon(self.writer.run)

    # --- for the model calls ---

    async def lookup(self, kind: str, key: str) -> str | None:
        """The cached response, or None; lookups made in the same moment share one query."""
        memory = self._memory
        if memory is not None and (kind, key) in memory:
            memory.move_to_end((kind, key))
            return memory[(kind, key)]
        erasures = self._erasures
        found = await self._reader.get((kind, key))
        if found is not None and erasures == self._erasures:
            self._keep(kind, key, found)
        return found

    def remember(self, entry: CacheEntry) -> None:
        """Keep a new entry (or count a hit), in the background."""
        if self._group is None:
            raise RuntimeError("the cache service is not started")
        self._keep(entry.kind, entry.key, entry.response)
        write_in_background(self._group, self.writer, entry)

    def _keep(self, kind: str, key: str, response: str) -> None:
        memory = self._memory
        if memory is None or len(response) > MEMORY_REPLY_CHARS:
            return
        memory[(kind, key)] = response
        memory.move_to_end((kind, key))
        if len(memory) > MEMORY_ENTRIES:
            memory.popitem(last=False)

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
        self._forget(lambda held: held == (kind, key))
        try:
            await self.tables.delete(kind, key)
        finally:   # a lookup that read the row while it was being deleted keeps nothing either
            self._forget(lambda held: held == (kind, key))

    async def clear(self, kind: str) -> None:
        self._forget(lambda held: held[0] == kind)
        try:
            await self.tables.clear(kind)
        finally:
            self._forget(lambda held: held[0] == kind)

    def _forget(self, erased: Callable[[tuple[str, str]], bool]) -> None:
        self._erasures += 1
        if self._memory is not None:
            for held in [held for held in self._memory if erased(held)]:
                del self._memory[held]
