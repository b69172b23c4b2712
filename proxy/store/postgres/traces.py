"""Chat traces in PostgreSQL: the SQL of ``store.tables.traces`` (proxy/store/protocols/traces.py),
twin of ``proxy/store/duckdb/traces.py``."""

from __future__ import annotations

import json
from typing import Any

from proxy.store.clock import now
from proxy.store.postgres.connection import Con, PgDatabase, storable
from proxy.store.protocols.traces import Trace
from proxy.store.sql_subjects import SqlTraces, TraceQueries

KEEP = 500  # the most recent traces kept; older ones are dropped as new ones arrive
TRACE_COLUMNS = ("id", "created_at", "api", "model", "mode", "query", "augmented", "reason", "detail")


def record_traces(con: Con, traces: list[Trace]) -> None:
    stamp = now()
    with con.cursor() as cur:   # executemany keeps the batch's order in the ids it draws
        cur.executemany("INSERT INTO traces (created_at, api, model, mode, query, augmented, reason, detail) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                        [[stamp, t.api, storable(t.model), t.mode, storable(t.query), t.augmented, storable(t.reason),
                          json.dumps(t.detail, ensure_ascii=False, default=str)] for t in traces])
    # replicas write traces concurrently: ids interleave, and the last KEEP ids are kept whoever wrote them
    con.execute("DELETE FROM traces WHERE id <= (SELECT max(id) FROM traces) - %s", [KEEP])


def recent_traces(con: Con, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    rows = con.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces "
                       "ORDER BY id DESC LIMIT %s OFFSET %s", [limit, offset]).fetchall()
    return [{**dict(zip(TRACE_COLUMNS, r, strict=True)), "created_at": r[1].isoformat(timespec="seconds") + "Z",
             "detail": json.loads(r[8])} for r in rows]


def trace_count(con: Con) -> int:
    row = con.execute("SELECT count(*) FROM traces").fetchone()
    return int(row[0]) if row else 0


def get_trace(con: Con, trace_id: int) -> dict[str, Any] | None:
    row = con.execute(f"SELECT {', '.join(TRACE_COLUMNS)} FROM traces WHERE id = %s", [trace_id]).fetchone()
    return dict(zip(TRACE_COLUMNS, row, strict=True)) if row else None


QUERIES = TraceQueries(record=record_traces, recent=recent_traces, count=trace_count, one=get_trace)


class PgTraces(SqlTraces):
    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db, QUERIES)
