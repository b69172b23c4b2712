"""The store's own settings and counters (the ``meta`` table: schema version, generation, embedding
model), in the SQL both engines speak (proxy/store/sql_dialect.py)."""

from __future__ import annotations

from proxy.store.sql_dialect import Sql


def get_meta(sql: Sql, key: str, default: str | None = None) -> str | None:
    row = sql.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else default


def set_meta(sql: Sql, key: str, value: str | int) -> None:
    sql.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, str(value)])
