"""Traces of chat turns (what was asked, which mode, what was injected), kept in DuckDB for the console."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxy.store.store import now
from proxy.store.duckdb.connection import Con

KEEP = 500


@dataclass
class Trace:
    api: str
    model: str
    mode: str
    query: str
    augmented: bool
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def record_traces(con: Con, traces: list[Trace]) -> None:
    stamp = now()
    con.executemany("INSERT INTO traces (created_at, api, model, mode, query, augmented, reason, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [[stamp, t.api, t.model, t.mode, t.query, t.augmented, t.reason,
                      json.dumps(t.detail, ensure_ascii=False, default=str)] for t in traces])
    con.execute("DELETE FROM traces WHERE id <= (SELECT max(id) FROM traces) - ?", [KEEP])


def recent_traces(con: Con, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    rows = con.execute("SELECT id, created_at, api, model, mode, query, augmented, reason, detail FROM traces "
                       "ORDER BY id DESC LIMIT ? OFFSET ?", [limit, offset]).fetchall()
    keys = ("id", "created_at", "api", "model", "mode", "query", "augmented", "reason", "detail")
    return [{**dict(zip(keys, r, strict=True)), "created_at": r[1].isoformat(timespec="seconds") + "Z",
             "detail": json.loads(r[8])} for r in rows]
