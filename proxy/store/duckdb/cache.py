"""The LLM cache in DuckDB: its lookup of cached replies (the rest is written once,
proxy/store/sql_cache.py)."""

from __future__ import annotations

import sys

from proxy.store.sql_cache import SqlCache
from proxy.store.sql_dialect import Sql


def cached_responses(sql: Sql, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The cached replies among ``wanted`` (kind, key) pairs, in one query (the key's index serves a
    small batch; a big one scans the cache once, still cheaper than a query per key; a join on the
    pairs would always scan it)."""
    rows = sql.execute("SELECT kind, key, response FROM llm_cache WHERE key IN (SELECT unnest(?::text[]))",
                       [list({key for _, key in wanted})]).fetchall()
    asked = set(wanted)
    return {(kind, key): response for kind, key, response in rows if (kind, key) in asked}


class DuckDBCache(SqlCache):
    sql = sys.modules[__name__]
