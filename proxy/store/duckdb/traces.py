"""Chat traces in DuckDB: the SQL of ``store.tables.traces`` (proxy/store/protocols/traces.py)."""

from __future__ import annotations

import json
from typing import Any

from proxy.store.clock import now
from proxy.store.duckdb.connection import Con, Database
from proxy.store.protocols.traces import Trace
from proxy.store.sql_subjects import SqlTraces, TraceQueries

KEEP = 500  # the most recent traces kept; older ones are dropped as new ones arrive
TRACE_COLUMNS = ("id", "created_at", "api", "model", "mode", "query", "augmented", "reason", "detail")


def record_traces(con: Con, traces: list[Trace]) -> None:
    stamp = now()
    con.executemany("INSERT INTO traces (created_at, api, model, mode, query, augmented, reason, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [[stamp, t.api, t.model, t.mode, t.query, t.augmented, t.reason,
                      json.dumps(t.detail, ensure_ascii=False, default=str)] for t in traces])
    con.execute("DELETE FROM traces WHERE id <= (SELECT max(id) FROM traces) - ?", [KEEP])


def recent_traces(con: Con, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    rows = con.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces "
                       "ORDER BY id DESC LIMIT ? OFFSET ?", [limit, offset]).fetchall()
    return [{**dict(zip(TRACE_COLUMNS, r, strict=True)), "created_at": r[1].isoformat(timespec="seconds") + "Z",
             "detail": json.loads(r[8])} for r in rows]


def trace_count(con: Con) -> int:
    row = con.execute("SELECT count(*) FROM traces").fetchone()
    return int(row[0]) if row else 0


def get_trace(con: Con, trace_id: int) -> dict[str, Any] | None:
    row = con.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces WHERE id = ?", [trace_id]).fetchone()
    return dict(zip(TRACE_COLUMNS, row, strict=True)) if row else None


QUERIES = TraceQueries(record=record_traces, recent=recent_traces, count=trace_count, one=get_trace)


class DuckDBTraces(SqlTraces):
    def __init__(self, db: Database) -> None:
        super().__init__(db, QUERIES)
