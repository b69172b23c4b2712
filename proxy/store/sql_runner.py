"""What the SQL adapters (``proxy/store/sql_*.py``) stand on: a backend's connection (``Runner``)
and the base that runs a statement written once, ``fn(sql, *args)`` (``sql``: the connection
speaking the shared SQL, proxy/store/sql_dialect.py), through it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from proxy.store.sql_dialect import Dialect


class Runner(Protocol):
    """A backend's connection: ``fn(connection, *args)`` read in a worker thread, or written in one
    transaction (``duckdb/connection.py``, ``postgres/connection.py``)."""

    dialect: Dialect

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def write(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def read_sync(self, fn: Callable[..., Any], *args: Any) -> Any: ...


class SqlAdapter:
    """One subject's tables over either backend: each statement is ``fn(sql, *args)``, written once
    in the adapter's module or, where the engines part, in the backend's (its ``sql`` module)."""

    def __init__(self, db: Runner) -> None:
        self.db = db
        self.dialect = db.dialect

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.db.read(self.dialect.bind(fn), *args)

    async def write(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.db.write(self.dialect.bind(fn), *args)

    def read_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.db.read_sync(self.dialect.bind(fn), *args)
