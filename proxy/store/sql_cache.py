"""The LLM cache over either backend (``CacheTables``, proxy/store/protocols/cache.py), written once
in the SQL both engines speak (proxy/store/sql_dialect.py). Several PostgreSQL replicas may write
the same entry: keeping one is idempotent (ON CONFLICT DO NOTHING) and hits are added by the
engine, never read and written back. A backend adds its lookup of cached replies (``sql``), where
the engines' indexes part."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from proxy.store.batching import BatchedReader, BatchWriter
from proxy.store.clock import now
from proxy.store.protocols.cache import CacheEntry, KindTotals
from proxy.store.sql_dialect import Sql, containing
from proxy.store.sql_runner import SqlAdapter

ENTRY_COLUMNS = ("key", "model", "hits", "kb_version", "created_at", "last_hit_at", "size")

# entries of a kind matching a pattern (all of them when it is NULL), given as [kind, pattern x 5]: a
# case-insensitive substring, its % _ \ taken literally (ILIKE scans the texts about twice as fast
# as contains(lower(...)) in DuckDB)
_MATCHES = """kind = ? AND (?::text IS NULL OR key ILIKE ? ESCAPE '\\' OR model ILIKE ? ESCAPE '\\'
              OR request ILIKE ? ESCAPE '\\' OR response ILIKE ? ESCAPE '\\')"""


def _matching(kind: str, search: str | None) -> list[Any]:
    pattern = containing(search) if search else None
    return [kind, *[pattern] * 5]


def _size(sql: Sql) -> str:
    """An entry's size in bytes."""
    return f"{sql.byte_length('request')} + {sql.byte_length('response')}"


def write_cache(sql: Sql, entries: list[CacheEntry], hits: list[CacheEntry]) -> None:
    """Keep new entries (one already stored stays as it is) and count the ``hits``."""
    stamp = now()
    fresh = list({(e.kind, e.key): e for e in entries}.values())
    if fresh:
        sql.execute("""INSERT INTO llm_cache (kind, key, model, request, response, created_at)
                       SELECT unnest(?::text[]), unnest(?::text[]), unnest(?::text[]), unnest(?::text[]),
                              unnest(?::text[]), ?
                       ON CONFLICT (kind, key) DO NOTHING""",
                    [[e.kind for e in fresh], [e.key for e in fresh], [e.model for e in fresh],
                     [e.request for e in fresh], [e.response for e in fresh], stamp])
    if hits and sql.dialect.updates_join_by_index:
        # one statement; a (kind, key) hit twice in the batch counts twice, as one UPDATE per hit would
        sql.execute("""UPDATE llm_cache AS c SET hits = c.hits + h.n, last_hit_at = ?
                       FROM (SELECT kind, key, count(*) AS n
                             FROM (SELECT unnest(?::text[]) AS kind, unnest(?::text[]) AS key) w
                             GROUP BY kind, key) AS h
                       WHERE c.kind = h.kind AND c.key = h.key""",
                    [stamp, [e.kind for e in hits], [e.key for e in hits]])
    elif hits:   # one UPDATE per hit, each through the key's index
        sql.executemany("UPDATE llm_cache SET hits = hits + 1, last_hit_at = ? WHERE kind = ? AND key = ?",
                        [(stamp, e.kind, e.key) for e in hits])


def kind_totals(sql: Sql) -> dict[str, KindTotals]:
    rows = sql.execute(f"""SELECT kind, count(*), coalesce(sum({_size(sql)}), 0), coalesce(sum(hits), 0)
                           FROM llm_cache GROUP BY kind""").fetchall()
    return {kind: KindTotals(int(n), int(size), int(hits)) for kind, n, size, hits in rows}


def list_entries(sql: Sql, kind: str, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    if sql.unstorable(search):
        return [], 0
    matching = _matching(kind, search)
    # one scan for the page and the total (a search reads every request and response); keys of one
    # instant in byte order
    rows = sql.execute(f"""SELECT key, model, hits, kb_version, created_at, last_hit_at, {_size(sql)}, count(*) OVER ()
                           FROM llm_cache WHERE {_MATCHES}
                           ORDER BY created_at DESC, key COLLATE "C" LIMIT ? OFFSET ?""",
                       [*matching, limit, offset]).fetchall()
    if rows:
        total = int(rows[0][-1])
    else:
        total = int(sql.one(f"SELECT count(*) FROM llm_cache WHERE {_MATCHES}", matching))
    return [dict(zip(ENTRY_COLUMNS, row[:-1], strict=True)) for row in rows], total


def get_entry(sql: Sql, kind: str, key: str) -> dict[str, Any] | None:
    if sql.unstorable(kind, key):
        return None
    row = sql.execute(f"""SELECT key, model, hits, kb_version, created_at, last_hit_at, {_size(sql)}, request, response
                          FROM llm_cache WHERE kind = ? AND key = ?""", [kind, key]).fetchone()
    return dict(zip((*ENTRY_COLUMNS, "request", "response"), row, strict=True)) if row else None


def kind_count(sql: Sql, kind: str) -> int:
    return int(sql.one("SELECT count(*) FROM llm_cache WHERE kind = ?", [kind]))


def delete_entry(sql: Sql, kind: str, key: str) -> None:
    if not sql.unstorable(kind, key):
        sql.execute("DELETE FROM llm_cache WHERE kind = ? AND key = ?", [kind, key])


def clear_kind(sql: Sql, kind: str) -> None:
    sql.execute("DELETE FROM llm_cache WHERE kind = ?", [kind])


def keep_entries(sql: Sql, entries: list[CacheEntry]) -> None:
    write_cache(sql, entries, [])


class SqlCache(SqlAdapter):
    """``CacheTables`` over either backend (see the module's docstring)."""

    sql: ModuleType   # the backend's ``cached_responses(sql, wanted)``

    async def totals(self) -> dict[str, KindTotals]:
        return await self.read(kind_totals)

    async def entries(self, kind: str, search: str | None, limit: int,
                      offset: int) -> tuple[list[dict[str, Any]], int]:
        return await self.read(list_entries, kind, search, limit, offset)

    async def entry(self, kind: str, key: str) -> dict[str, Any] | None:
        return await self.read(get_entry, kind, key)

    async def count(self, kind: str) -> int:
        return await self.read(kind_count, kind)

    async def delete(self, kind: str, key: str) -> None:
        await self.write(delete_entry, kind, key)

    async def clear(self, kind: str) -> None:
        await self.write(clear_kind, kind)

    def writer(self, max_delay: float) -> BatchWriter[CacheEntry]:
        return BatchWriter(self.db, self.dialect.bind(keep_entries), max_delay=max_delay)

    def reader(self) -> BatchedReader[tuple[str, str], str]:
        return BatchedReader(self.db, self.dialect.bind(self.sql.cached_responses))
