"""The LLM cache in DuckDB: the SQL of ``store.tables.cache`` (proxy/store/protocols/cache.py)."""

from __future__ import annotations

from typing import Any

from proxy.store.clock import now
from proxy.store.duckdb.connection import Con, Database
from proxy.store.protocols.cache import CacheEntry, KindTotals
from proxy.store.sql_subjects import CacheQueries, SqlCache

ENTRY_COLUMNS = ("key", "model", "hits", "kb_version", "created_at", "last_hit_at", "size")

# entries matching $q (all of them when $q is NULL): a case-insensitive substring, its % _ \ taken
# literally (ILIKE scans the texts about twice as fast as contains(lower(...)))
_MATCHES = """kind = $kind AND ($q IS NULL OR key ILIKE $q ESCAPE '\\' OR model ILIKE $q ESCAPE '\\'
              OR request ILIKE $q ESCAPE '\\' OR response ILIKE $q ESCAPE '\\')"""


def _pattern(search: str | None) -> str | None:
    if not search:
        return None
    return "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _count(con: Con, sql: str, params: Any) -> int:
    row = con.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def write_cache(con: Con, entries: list[CacheEntry], hits: list[CacheEntry]) -> None:
    """Keep new entries (one already stored stays as it is) and count the ``hits``."""
    stamp = now()
    fresh = list({(e.kind, e.key): e for e in entries}.values())
    if fresh:
        con.execute("""INSERT OR IGNORE INTO llm_cache (kind, key, model, request, response, created_at)
                       SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]),
                              unnest($4::VARCHAR[]), unnest($5::VARCHAR[]), $6""",
                    [[e.kind for e in fresh], [e.key for e in fresh], [e.model for e in fresh],
                     [e.request for e in fresh], [e.response for e in fresh], stamp])
    for e in hits:
        con.execute("UPDATE llm_cache SET hits = hits + 1, last_hit_at = ? WHERE kind = ? AND key = ?",
                    [stamp, e.kind, e.key])


def cached_responses(con: Con, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The cached replies among ``wanted`` (kind, key) pairs, in one query (the key's index serves a
    small batch; a big one scans the cache once, still cheaper than a query per key)."""
    rows = con.execute("SELECT kind, key, response FROM llm_cache WHERE key IN (SELECT unnest($1::VARCHAR[]))",
                       [list({key for _, key in wanted})]).fetchall()
    asked = set(wanted)
    return {(kind, key): response for kind, key, response in rows if (kind, key) in asked}


def kind_totals(con: Con) -> dict[str, KindTotals]:
    rows = con.execute("""SELECT kind, count(*), coalesce(sum(strlen(request) + strlen(response)), 0),
                                 coalesce(sum(hits), 0)
                          FROM llm_cache GROUP BY kind""").fetchall()
    return {kind: KindTotals(n, size, hits) for kind, n, size, hits in rows}


def list_entries(con: Con, kind: str, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    params = {"kind": kind, "q": _pattern(search)}
    # one scan for the page and the total (a search reads every request and response)
    rows = con.execute(f"""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                  strlen(request) + strlen(response), count(*) OVER ()
                           FROM llm_cache WHERE {_MATCHES}
                           ORDER BY created_at DESC, key LIMIT $limit OFFSET $offset""",
                       {**params, "limit": limit, "offset": offset}).fetchall()
    if rows:
        total = rows[0][-1]
    else:
        total = _count(con, f"SELECT count(*) FROM llm_cache WHERE {_MATCHES}", params)
    return [dict(zip(ENTRY_COLUMNS, row[:-1], strict=True)) for row in rows], total


def get_entry(con: Con, kind: str, key: str) -> dict[str, Any] | None:
    row = con.execute("""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                strlen(request) + strlen(response), request, response
                         FROM llm_cache WHERE kind = ? AND key = ?""", [kind, key]).fetchone()
    return dict(zip((*ENTRY_COLUMNS, "request", "response"), row, strict=True)) if row else None


def kind_count(con: Con, kind: str) -> int:
    return _count(con, "SELECT count(*) FROM llm_cache WHERE kind = ?", [kind])


def delete_entry(con: Con, kind: str, key: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = ? AND key = ?", [kind, key])


def clear_kind(con: Con, kind: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = ?", [kind])


def _keep_entries(con: Con, entries: list[CacheEntry]) -> None:
    write_cache(con, entries, [])


QUERIES = CacheQueries(totals=kind_totals, entries=list_entries, entry=get_entry, count=kind_count,
                       delete=delete_entry, clear=clear_kind, keep=_keep_entries, responses=cached_responses)


class DuckDBCache(SqlCache):
    def __init__(self, db: Database) -> None:
        super().__init__(db, QUERIES)
