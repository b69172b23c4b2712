"""The cache and trace tables over either backend's SQL: the adapters were the same line for line
in DuckDB and PostgreSQL, only the functions they run differ. Each backend binds its own functions
(``duckdb/cache.py``, ``postgres/cache.py``, ``duckdb/traces.py``, ``postgres/traces.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.store.batching import BatchedReader, BatchWriter, Database
from proxy.store.protocols.cache import CacheEntry, KindTotals
from proxy.store.protocols.traces import Trace


@dataclass(frozen=True)
class CacheQueries:
    """One backend's cache statements: each ``fn(connection, *args)``."""
    totals: Callable[..., dict[str, KindTotals]]
    entries: Callable[..., tuple[list[dict[str, Any]], int]]
    entry: Callable[..., dict[str, Any] | None]
    count: Callable[..., int]
    delete: Callable[..., None]
    clear: Callable[..., None]
    keep: Callable[..., None]                      # new entries, grouped
    responses: Callable[..., dict[tuple[str, str], str]]   # replies by (kind, key), grouped


class SqlCache:
    def __init__(self, db: Database, queries: CacheQueries) -> None:
        self.db = db
        self.queries = queries

    async def totals(self) -> dict[str, KindTotals]:
        return await self.db.read(self.queries.totals)

    async def entries(self, kind: str, search: str | None, limit: int,
                      offset: int) -> tuple[list[dict[str, Any]], int]:
        return await self.db.read(self.queries.entries, kind, search, limit, offset)

    async def entry(self, kind: str, key: str) -> dict[str, Any] | None:
        return await self.db.read(self.queries.entry, kind, key)

    async def count(self, kind: str) -> int:
        return await self.db.read(self.queries.count, kind)

    async def delete(self, kind: str, key: str) -> None:
        await self.db.write(self.queries.delete, kind, key)

    async def clear(self, kind: str) -> None:
        await self.db.write(self.queries.clear, kind)

    def writer(self, max_delay: float) -> BatchWriter[CacheEntry]:
        return BatchWriter(self.db, self.queries.keep, max_delay=max_delay)

    def reader(self) -> BatchedReader[tuple[str, str], str]:
        return BatchedReader(self.db, self.queries.responses)


@dataclass(frozen=True)
class TraceQueries:
    record: Callable[..., None]
    recent: Callable[..., list[dict[str, Any]]]
    count: Callable[..., int]
    one: Callable[..., dict[str, Any] | None]


class SqlTraces:
    def __init__(self, db: Database, queries: TraceQueries) -> None:
        self.db = db
        self.queries = queries

    def writer(self, max_delay: float) -> BatchWriter[Trace]:
        return BatchWriter(self.db, self.queries.record, max_delay=max_delay)

    async def recent(self, limit: int, offset: int) -> list[dict[str, Any]]:
        return await self.db.read(self.queries.recent, limit, offset)

    async def count(self) -> int:
        return await self.db.read(self.queries.count)

    async def one(self, trace_id: int) -> dict[str, Any] | None:
        return await self.db.read(self.queries.one, trace_id)
