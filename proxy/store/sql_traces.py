"""Chat traces over either backend (``TraceTables``, proxy/store/protocols/traces.py), written once in
the SQL both engines speak (proxy/store/sql_dialect.py)."""

from __future__ import annotations

import json
from typing import Any

from proxy.store.batching import BatchWriter
from proxy.store.clock import now
from proxy.store.protocols.traces import Trace
from proxy.store.sql_dialect import Sql
from proxy.store.sql_runner import SqlAdapter

KEEP = 500  # the most recent traces kept; older ones are dropped as new ones arrive
TRACE_COLUMNS = ("id", "created_at", "api", "model", "mode", "query", "augmented", "reason", "detail")


def record_traces(sql: Sql, traces: list[Trace]) -> None:
    stamp = now()
    # one row at a time keeps the batch's order in the ids they draw
    sql.executemany("INSERT INTO traces (created_at, api, model, mode, query, augmented, reason, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [[stamp, t.api, sql.storable(t.model), t.mode, sql.storable(t.query), t.augmented,
                      sql.storable(t.reason), json.dumps(t.detail, ensure_ascii=False, default=str)] for t in traces])
    # PostgreSQL's replicas write traces concurrently: ids interleave, and the last KEEP ids are kept
    # whoever wrote them
    sql.execute("DELETE FROM traces WHERE id <= (SELECT max(id) FROM traces) - ?", [KEEP])


def recent_traces(sql: Sql, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    rows = sql.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces ORDER BY id DESC LIMIT ? OFFSET ?",
                       [limit, offset]).fetchall()
    return [{**dict(zip(TRACE_COLUMNS, r, strict=True)), "created_at": r[1].isoformat(timespec="seconds") + "Z",
             "detail": json.loads(r[8])} for r in rows]


def trace_count(sql: Sql) -> int:
    return int(sql.one("SELECT count(*) FROM traces"))


def get_trace(sql: Sql, trace_id: int) -> dict[str, Any] | None:
    row = sql.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces WHERE id = ?", [trace_id]).fetchone()
    return dict(zip(TRACE_COLUMNS, row, strict=True)) if row else None


class SqlTraces(SqlAdapter):
    """``TraceTables`` over either backend."""

    def writer(self, max_delay: float) -> BatchWriter[Trace]:
        return BatchWriter(self.db, self.dialect.bind(record_traces), max_delay=max_delay)

    async def recent(self, limit: int, offset: int) -> list[dict[str, Any]]:
        return await self.read(recent_traces, limit, offset)

    async def count(self) -> int:
        return await self.read(trace_count)

    async def one(self, trace_id: int) -> dict[str, Any] | None:
        return await self.read(get_trace, trace_id)
