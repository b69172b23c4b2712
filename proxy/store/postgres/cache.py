"""The LLM cache in PostgreSQL: the SQL of ``store.tables.cache`` (proxy/store/protocols/cache.py),
twin of ``proxy/store/duckdb/cache.py``. Several replicas may write the same entry: keeping one is
idempotent (ON CONFLICT DO NOTHING) and hits are added by the server, never read and written back."""

from __future__ import annotations

from typing import Any

from proxy.store.clock import now
from proxy.store.postgres.connection import Con, PgDatabase, holds_nul
from proxy.store.protocols.cache import CacheEntry, KindTotals
from proxy.store.sql_subjects import CacheQueries, SqlCache

ENTRY_COLUMNS = ("key", "model", "hits", "kb_version", "created_at", "last_hit_at", "size")

# entries matching %(q)s (all of them when it is NULL): a case-insensitive substring, its % _ \ taken
# literally
_MATCHES = """kind = %(kind)s AND (%(q)s::text IS NULL OR key ILIKE %(q)s ESCAPE '\\'
              OR model ILIKE %(q)s ESCAPE '\\' OR request ILIKE %(q)s ESCAPE '\\'
              OR response ILIKE %(q)s ESCAPE '\\')"""


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
        con.execute("""INSERT INTO llm_cache (kind, key, model, request, response, created_at)
                       SELECT kind, key, model, request, response, %s
                       FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
                            AS e(kind, key, model, request, response)
                       ON CONFLICT (kind, key) DO NOTHING""",
                    [stamp, [e.kind for e in fresh], [e.key for e in fresh], [e.model for e in fresh],
                     [e.request for e in fresh], [e.response for e in fresh]])
    if hits:
        # one statement; a (kind, key) hit twice in the batch counts twice, as one UPDATE per hit would
        con.execute("""UPDATE llm_cache AS c SET hits = c.hits + h.n, last_hit_at = %s
                       FROM (SELECT kind, key, count(*) AS n FROM unnest(%s::text[], %s::text[]) AS w(kind, key)
                             GROUP BY kind, key) AS h
                       WHERE c.kind = h.kind AND c.key = h.key""",
                    [stamp, [e.kind for e in hits], [e.key for e in hits]])


def cached_responses(con: Con, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The cached replies among ``wanted`` (kind, key) pairs, in one query (the primary key serves it)."""
    pairs = list(set(wanted))
    rows = con.execute("""SELECT kind, key, response FROM llm_cache
                          JOIN unnest(%s::text[], %s::text[]) AS w(kind, key) USING (kind, key)""",
                       [[kind for kind, _ in pairs], [key for _, key in pairs]]).fetchall()
    return {(kind, key): response for kind, key, response in rows}


def kind_totals(con: Con) -> dict[str, KindTotals]:
    # sizes in bytes, as DuckDB's strlen counts them
    rows = con.execute("""SELECT kind, count(*), coalesce(sum(octet_length(request) + octet_length(response)), 0),
                                 coalesce(sum(hits), 0)
                          FROM llm_cache GROUP BY kind""").fetchall()
    return {kind: KindTotals(int(n), int(size), int(hits)) for kind, n, size, hits in rows}


def list_entries(con: Con, kind: str, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    if holds_nul(search):
        return [], 0
    params = {"kind": kind, "q": _pattern(search)}
    # one scan for the page and the total (a search reads every request and response); keys of one
    # instant in byte order, as DuckDB sorts them
    rows = con.execute(f"""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                  octet_length(request) + octet_length(response), count(*) OVER ()
                           FROM llm_cache WHERE {_MATCHES}
                           ORDER BY created_at DESC, key COLLATE "C" LIMIT %(limit)s OFFSET %(offset)s""",
                       {**params, "limit": limit, "offset": offset}).fetchall()
    if rows:
        total = int(rows[0][-1])
    else:
        total = _count(con, f"SELECT count(*) FROM llm_cache WHERE {_MATCHES}", params)
    return [dict(zip(ENTRY_COLUMNS, row[:-1], strict=True)) for row in rows], total


def get_entry(con: Con, kind: str, key: str) -> dict[str, Any] | None:
    row = con.execute("""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                octet_length(request) + octet_length(response), request, response
                         FROM llm_cache WHERE kind = %s AND key = %s""", [kind, key]).fetchone()
    return dict(zip((*ENTRY_COLUMNS, "request", "response"), row, strict=True)) if row else None


def kind_count(con: Con, kind: str) -> int:
    return _count(con, "SELECT count(*) FROM llm_cache WHERE kind = %s", [kind])


def delete_entry(con: Con, kind: str, key: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = %s AND key = %s", [kind, key])


def clear_kind(con: Con, kind: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = %s", [kind])


def _keep_entries(con: Con, entries: list[CacheEntry]) -> None:
    write_cache(con, entries, [])


QUERIES = CacheQueries(totals=kind_totals, entries=list_entries, entry=get_entry, count=kind_count,
                       delete=delete_entry, clear=clear_kind, keep=_keep_entries, responses=cached_responses)


class PgCache(SqlCache):
    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db, QUERIES)
