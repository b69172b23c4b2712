"""The cache, trace and re-embedding tables over either backend's SQL: the adapters were the same
line for line in DuckDB and PostgreSQL, only the functions they run differ. Each backend binds its
own functions (``duckdb/cache.py``, ``postgres/cache.py``, ``duckdb/traces.py``, ``postgres/traces.py``,
``duckdb/reembed.py``, ``postgres/reembed.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from proxy.store.batching import BatchedDatabase, BatchedReader, BatchWriter
from proxy.store.protocols.cache import CacheEntry, KindTotals
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.protocols.traces import Trace
from proxy.store.vector_models import REEMBEDDED, TableModel


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
    def __init__(self, db: BatchedDatabase, queries: CacheQueries) -> None:
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
    def __init__(self, db: BatchedDatabase, queries: TraceQueries) -> None:
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


@dataclass(frozen=True)
class ReembedQueries:
    """One backend's re-embedding statements: each ``fn(connection, *args)``."""
    models: Callable[..., dict[str, TableModel]]
    to_embed: Callable[..., list[ToEmbed]]
    progress: Callable[..., tuple[int, int]]
    staged_models: Callable[..., dict[str, int]]
    discard_staged: Callable[..., int]
    stage: Callable[..., None]
    swap: Callable[..., bool]


class SqlReembed:
    """``ReembedTables`` (proxy/store/protocols/reembed.py) over a backend's statements."""

    def __init__(self, db: BatchedDatabase, queries: ReembedQueries) -> None:
        self.db = db
        self.queries = queries

    async def models(self) -> dict[str, TableModel]:
        return await self.db.read(self.queries.models)

    async def to_embed(self, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
        return await self.db.read(self.queries.to_embed, _reembedded(table), model, after, limit)

    async def progress(self, table: str, model: str) -> tuple[int, int]:
        return await self.db.read(self.queries.progress, _reembedded(table), model)

    async def staged_models(self) -> dict[str, int]:
        return await self.db.read(self.queries.staged_models)

    async def discard_staged(self, keep: str | None, dim: int | None = None) -> int:
        return await self.db.write(self.queries.discard_staged, keep, dim)

    async def stage(self, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
                    hashes: list[str] | None) -> None:
        await self.db.write(self.queries.stage, _reembedded(table), model, rows, vectors, hashes)

    async def swap(self, model: str, dim: int) -> bool:
        return await self.db.write(self.queries.swap, model, dim)


def _reembedded(table: str) -> str:
    """``table`` when it holds vectors to re-embed (its name goes into the statements)."""
    if table not in REEMBEDDED:
        raise ValueError(f"no vectors to re-embed in table {table}")
    return table
