"""Traces of chat turns (what was asked, which mode, what was injected) as the knowledge service
offers them (``knowledge.traces``): recorded off the chat's path, read by the console and /rag/traces."""

from __future__ import annotations

from typing import Any

from anyio.abc import TaskGroup

from proxy.knowledge.bookkeeping import write_in_background
from proxy.store.protocols.traces import Trace, TraceTables

__all__ = ["Trace", "TraceService"]

# traces wait this long for others to share their commit (they are off every chat's path)
WRITE_DELAY = 0.2


class TraceService:
    def __init__(self, tables: TraceTables) -> None:
        self.tables = tables
        self.writer = tables.writer(WRITE_DELAY)
        self._group: TaskGroup | None = None

    def start(self, group: TaskGroup) -> None:
        """Commit traces from now on, in ``group`` (cancelled at shutdown)."""
        self._group = group
        group.start_soon(self.writer.run)

    def record(self, trace: Trace) -> None:
        """Keep a chat turn's trace, in the background."""
        if self._group is None:
            raise RuntimeError("the trace service is not started")
        write_in_background(self._group, self.writer, trace)

    async def recent(self, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """The newest turns first, their detail as a dict."""
        return await self.tables.recent(limit, offset)

    async def count(self) -> int:
        return await self.tables.count()

    async def one(self, trace_id: int) -> dict[str, Any] | None:
        """One turn, its detail as stored (JSON text: the console reads it leniently)."""
        return await self.tables.one(trace_id)
