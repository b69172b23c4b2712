"""The small dialect layer under the SQL adapters (``sql_documents.py``, ``sql_graph_rows.py``,
``sql_retrieval_rows.py``): an adapter is written once and runs a backend's statements by name
(``sql``: the backend's module of ``fn(connection, *args)``) through that backend's connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Runner(Protocol):
    """A backend's connection: ``fn(connection, *args)`` read in a worker thread, or written in one
    transaction (``duckdb/connection.py``, ``postgres/connection.py``)."""

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def write(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def read_sync(self, fn: Callable[..., Any], *args: Any) -> Any: ...
