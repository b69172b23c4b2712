"""The LLM cache in PostgreSQL: its lookup of cached replies (the rest is written once,
proxy/store/sql_cache.py)."""

from __future__ import annotations

import sys

from proxy.store.sql_cache import SqlCache
from proxy.store.sql_dialect import Sql


def cached_responses(sql: Sql, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The cached replies among ``wanted`` (kind, key) pairs, in one query (the primary key, kind
    then key, serves the join on the pairs)."""
    pairs = list(set(wanted))
    rows = sql.execute("""SELECT kind, key, response FROM llm_cache
                          JOIN unnest(?::text[], ?::text[]) AS w(kind, key) USING (kind, key)""",
                       [[kind for kind, _ in pairs], [key for _, key in pairs]]).fetchall()
    return {(kind, key): response for kind, key, response in rows}


class PgCache(SqlCache):
    sql = sys.modules[__name__]
