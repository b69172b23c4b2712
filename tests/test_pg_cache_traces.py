"""The LLM cache's and the chat traces' tables held to the same answers on both backends (DuckDB and
PostgreSQL): lookups, totals, listing, search, paging, deleting, clearing; traces' paging, detail and
trimming to the most recent ones."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from proxy.store.clock import now
from proxy.store.duckdb.cache import DuckDBCache
from proxy.store.postgres.cache import PgCache
from proxy.store.protocols.cache import CacheEntry, CacheTables, KindTotals
from proxy.store.protocols.traces import Trace, TraceTables
from proxy.store.sql_cache import write_cache
from proxy.store.sql_traces import KEEP, SqlTraces

pytestmark = pytest.mark.anyio

BASE = datetime(2024, 5, 1, 12, 0, 0)


def cache_of(backend: tuple[str, Any]) -> CacheTables:
    name, db = backend
    return DuckDBCache(db) if name == "embedded" else PgCache(db)


def traces_of(backend: tuple[str, Any]) -> TraceTables:
    _, db = backend
    return SqlTraces(db)   # written once for both


def placeholders(name: str, sql: str) -> str:
    """DuckDB's ``?`` placeholders as psycopg's ``%s`` for PostgreSQL (test set-up only)."""
    return sql if name == "embedded" else sql.replace("?", "%s")


async def execute(backend: tuple[str, Any], sql: str, params: list[Any]) -> None:
    name, db = backend
    await db.write(lambda con: con.execute(placeholders(name, sql), params))


async def rows(backend: tuple[str, Any], sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    name, db = backend
    return [tuple(r) for r in await db.read(lambda con: con.execute(placeholders(name, sql), params or []).fetchall())]


async def seed(backend: tuple[str, Any], entries: list[tuple[str, str, str, str, str, int, int]]) -> None:
    """Entries with their hits and creation time (minutes after BASE), as the console tests seed them."""
    for kind, key, model, request, response, hits, minutes in entries:
        await execute(backend, "INSERT INTO llm_cache (kind, key, model, request, response, hits, created_at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      [kind, key, model, request, response, hits, BASE + timedelta(minutes=minutes)])


async def keep(cache: CacheTables, entries: list[CacheEntry]) -> None:
    """Entries through the grouped writer, as the cache service hands them over."""
    writer = cache.writer(0.0)
    async with anyio.create_task_group() as group:
        group.start_soon(writer.run)
        for entry in entries:
            await writer.write(entry)
        group.cancel_scope.cancel()


ENTRIES = [
    ("extract", "ex-1", "llama3", '{"content": "Alice leads Orion"}', '{"entities": ["Alice"]}', 3, 1),
    ("extract", "ex-2", "llama3", "plain request about Bob", "plain reply", 0, 2),
    ("summary", "su/1?x=y", "qwen", "summarise Acme", "Acme est une société", 5, 3),   # non-ASCII: bytes
    ("keywords", "kw-1", "qwen", "100% of_it\\", '{"high_level": ["x"]}', 1, 4),
]


def size(kind: str) -> int:
    return sum(len((e[3] + e[4]).encode()) for e in ENTRIES if e[0] == kind)


# --- the cache ---

async def test_kept_entries_are_found_together_and_a_stored_one_stays(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    await keep(cache, [CacheEntry("extract", "k1", "m", "req", "first"),
                       CacheEntry("summary", "k1", "m", "req", "a summary"),
                       CacheEntry("extract", "k1", "m", "req", "second")])   # same key in one batch: the first
    await keep(cache, [CacheEntry("extract", "k1", "other", "req", "later")])  # already stored: left as it is
    reader = cache.reader()
    wanted = [("extract", "k1"), ("summary", "k1"), ("answer", "k1"), ("extract", "missing")]
    found: dict[tuple[str, str], str | None] = {}

    async def look(pair: tuple[str, str]) -> None:
        found[pair] = await reader.get(pair)

    async with anyio.create_task_group() as group:   # looked up in the same moment: one query
        for pair in wanted:
            group.start_soon(look, pair)
    assert found == {("extract", "k1"): "first", ("summary", "k1"): "a summary",
                     ("answer", "k1"): None, ("extract", "missing"): None}
    assert await reader.get(("extract", "k1")) == "first"   # alone too
    entry = await cache.entry("extract", "k1")
    assert entry is not None and entry["model"] == "m" and entry["hits"] == 0 and entry["last_hit_at"] is None


async def test_hits_are_added_for_each_one_counted(backend_db: tuple[str, Any]) -> None:
    name, db = backend_db
    keep = db.dialect.bind(write_cache)   # the commit path's
    hit = CacheEntry("answer", "a", "m", "q", "r")
    await db.write(keep, [hit, CacheEntry("answer", "b", "m", "q", "r")], [])
    await db.write(keep, [], [hit, hit, CacheEntry("answer", "gone", "m", "q", "r")])
    await db.write(keep, [hit], [hit])   # kept again (stays) and hit once more
    cache = cache_of(backend_db)
    a, b = await cache.entry("answer", "a"), await cache.entry("answer", "b")
    assert a is not None and b is not None
    assert a["hits"] == 3 and isinstance(a["last_hit_at"], datetime)
    assert b["hits"] == 0 and b["last_hit_at"] is None
    assert await cache.entry("answer", "gone") is None   # a hit does not make an entry
    assert await cache.totals() == {"answer": KindTotals(2, 4, 3)}


async def test_totals_count_size_in_bytes_and_hits_per_kind(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    assert await cache.totals() == {}
    await seed(backend_db, ENTRIES)
    totals = await cache.totals()
    assert totals == {"extract": KindTotals(2, size("extract"), 3), "summary": KindTotals(1, size("summary"), 5),
                      "keywords": KindTotals(1, size("keywords"), 1)}
    assert all(type(v) is int for t in totals.values() for v in (t.count, t.size, t.hits))
    assert [await cache.count(kind) for kind in ("extract", "summary", "keywords", "answer")] == [2, 1, 1, 0]


async def test_entries_newest_first_with_their_columns_and_one_entry_in_full(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    await seed(backend_db, ENTRIES)
    page, total = await cache.entries("extract", None, 50, 0)
    assert total == 2 and [e["key"] for e in page] == ["ex-2", "ex-1"]
    assert page[1] == {"key": "ex-1", "model": "llama3", "hits": 3, "kb_version": None,
                       "created_at": BASE + timedelta(minutes=1), "last_hit_at": None,
                       "size": size("extract") - len(b"plain request about Bobplain reply")}
    entry = await cache.entry("summary", "su/1?x=y")
    assert entry == {"key": "su/1?x=y", "model": "qwen", "hits": 5, "kb_version": None,
                     "created_at": BASE + timedelta(minutes=3), "last_hit_at": None, "size": size("summary"),
                     "request": "summarise Acme", "response": "Acme est une société"}
    assert await cache.entry("extract", "su/1?x=y") is None   # another kind's key
    await execute(backend_db, "UPDATE llm_cache SET kb_version = ? WHERE key = ?", [7, "ex-1"])
    assert (await cache.entries("extract", None, 50, 0))[0][1]["kb_version"] == 7
    assert (await cache.entry("extract", "ex-1") or {})["kb_version"] == 7


async def test_search_is_a_literal_case_insensitive_substring(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    await seed(backend_db, ENTRIES)

    async def keys(kind: str, search: str | None) -> tuple[list[str], int]:
        page, total = await cache.entries(kind, search, 50, 0)
        return [e["key"] for e in page], total

    assert await keys("extract", "ORION") == (["ex-1"], 1)        # in the request
    assert await keys("extract", "plain REPLY") == (["ex-2"], 1)  # in the response
    assert await keys("extract", "LLAMA") == (["ex-2", "ex-1"], 2)   # in the model
    assert await keys("summary", "SU/1?") == (["su/1?x=y"], 1)   # in the key
    assert await keys("summary", "SOCIÉTÉ") == (["su/1?x=y"], 1)
    assert await keys("extract", "") == (["ex-2", "ex-1"], 2)     # empty: everything
    for hostile in ("%' OR 1=1 --", "%", "_", "'", "\\"):
        assert await keys("extract", hostile) == ([], 0), hostile
    assert await keys("keywords", "100%") == (["kw-1"], 1)       # % _ \ taken literally
    assert await keys("keywords", "of_it\\") == (["kw-1"], 1)
    assert await keys("keywords", "0_") == ([], 0)


async def test_entries_are_paged_with_the_total(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    await seed(backend_db, [("answer", f"a-{i:03}", "m", "q", "r", 0, i) for i in range(120)]
               + [("answer", key, "m", "q", "r", 0, 500) for key in ("t-b", "T-a", "t-a")])  # one instant
    first, total = await cache.entries("answer", None, 50, 0)
    assert total == 123 and len(first) == 50
    assert [e["key"] for e in first[:4]] == ["T-a", "t-a", "t-b", "a-119"]   # same instant: by key's bytes
    last, total = await cache.entries("answer", None, 50, 100)
    assert total == 123 and len(last) == 23 and last[-1]["key"] == "a-000"
    beyond, total = await cache.entries("answer", None, 50, 200)
    assert beyond == [] and total == 123   # past the end: the total still counted
    found, total = await cache.entries("answer", "a-11", 5, 5)
    assert [e["key"] for e in found] == ["a-114", "a-113", "a-112", "a-111", "a-110"] and total == 10


async def test_delete_one_entry_and_clear_one_kind(backend_db: tuple[str, Any]) -> None:
    cache = cache_of(backend_db)
    await seed(backend_db, [*ENTRIES, ("summary", "ex-1", "qwen", "q", "r", 0, 5)])
    await cache.delete("extract", "ex-1")
    await cache.delete("extract", "ex-1")   # already gone: nothing happens
    await cache.delete("answer", "never")
    assert sorted(await rows(backend_db, "SELECT kind, key FROM llm_cache")) == [
        ("extract", "ex-2"), ("keywords", "kw-1"), ("summary", "ex-1"), ("summary", "su/1?x=y")]
    await cache.clear("summary")
    await cache.clear("answer")   # an empty kind
    assert sorted(await rows(backend_db, "SELECT kind, key FROM llm_cache")) == [
        ("extract", "ex-2"), ("keywords", "kw-1")]
    assert await cache.count("summary") == 0 and set(await cache.totals()) == {"extract", "keywords"}


# --- the traces ---

async def record(traces: TraceTables, batch: list[Trace]) -> None:
    writer = traces.writer(0.0)
    async with anyio.create_task_group() as group:
        group.start_soon(writer.run)
        for trace in batch:
            writer.submit(trace)  # type: ignore[attr-defined]
        await writer.write(Trace("ollama", "m", "mix", "last of the batch", True))
        group.cancel_scope.cancel()


DETAIL = {"keywords": {"high_level": ["leadership"]}, "entities": ["Alice", "Orion"], "chunks": ["c1"],
          "timings": {"total_ms": 12.5}, "note": "é ü", "when": datetime(2024, 1, 2, 3, 4, 5)}


async def test_traces_newest_first_paged_with_detail(backend_db: tuple[str, Any]) -> None:
    traces = traces_of(backend_db)
    assert await traces.recent(50, 0) == [] and await traces.count() == 0
    before = now().replace(microsecond=0)
    await record(traces, [Trace("ollama", "llama3", "mix", "Who leads Orion?", True, None, DETAIL),
                          Trace("openai", "gpt", "local", "hello", False, "nothing relevant found")])
    recent = await traces.recent(50, 0)
    assert [t["query"] for t in recent] == ["last of the batch", "hello", "Who leads Orion?"]
    assert await traces.count() == 3
    ids = [t["id"] for t in recent]
    assert ids == sorted(ids, reverse=True) and all(type(i) is int for i in ids)
    oldest = recent[2]
    assert {k: v for k, v in oldest.items() if k not in ("id", "created_at")} == {
        "api": "ollama", "model": "llama3", "mode": "mix", "query": "Who leads Orion?", "augmented": True,
        "reason": None, "detail": {**DETAIL, "when": "2024-01-02 03:04:05"}}
    assert recent[1]["reason"] == "nothing relevant found" and recent[1]["augmented"] is False
    assert recent[1]["detail"] == {}
    stamp = oldest["created_at"]
    assert stamp.endswith("Z") and len(stamp) == len("2024-05-01T12:00:00Z")
    assert timedelta(0) <= datetime.fromisoformat(stamp[:-1]) - before < timedelta(minutes=1)   # UTC, now
    assert [t["query"] for t in await traces.recent(1, 1)] == ["hello"]
    assert await traces.recent(5, 3) == []


async def test_one_trace_keeps_its_detail_as_stored(backend_db: tuple[str, Any]) -> None:
    traces = traces_of(backend_db)
    await record(traces, [Trace("query", "", "naive", "x" * 300, False, None, DETAIL)])
    newest = await traces.recent(2, 0)
    one = await traces.one(newest[1]["id"])
    assert one is not None
    assert isinstance(one["created_at"], datetime)
    assert one["created_at"].isoformat(timespec="seconds") + "Z" == newest[1]["created_at"]
    assert isinstance(one["detail"], str) and json.loads(one["detail"]) == newest[1]["detail"]
    assert "é ü" in one["detail"]   # not escaped to \u sequences
    assert {k: one[k] for k in ("id", "api", "model", "mode", "query", "augmented", "reason")} == {
        "id": newest[1]["id"], "api": "query", "model": "", "mode": "naive", "query": "x" * 300,
        "augmented": False, "reason": None}
    assert await traces.one(newest[0]["id"] + 1000) is None


async def test_only_the_most_recent_traces_are_kept(backend_db: tuple[str, Any]) -> None:
    traces = traces_of(backend_db)
    await record(traces, [Trace("ollama", "m", "mix", f"question {i}", True) for i in range(KEEP + 10)])
    assert await traces.count() == KEEP
    recent = await traces.recent(KEEP + 50, 0)
    assert len(recent) == KEEP and recent[0]["query"] == "last of the batch"
    assert recent[-1]["query"] == "question 11"   # the oldest eleven dropped
    await record(traces, [])
    assert await traces.count() == KEEP and (await traces.recent(1, KEEP - 1))[0]["query"] == "question 12"


# --- several replicas on one PostgreSQL base ---

async def test_replicas_keep_an_entry_once_and_add_up_their_hits(pg_server: str, pg_schema: str) -> None:
    from proxy.store.postgres.connection import PgDatabase

    replicas = [PgDatabase(pg_server, pg_schema) for _ in range(2)]
    try:
        same = [CacheEntry("extract", f"k{i}", "m", "req", "resp") for i in range(20)]

        async def replica(db: PgDatabase, reply: str) -> None:
            for _ in range(5):
                await db.write(db.dialect.bind(write_cache),
                               [CacheEntry(e.kind, e.key, e.model, e.request, reply) for e in same], same)

        async with anyio.create_task_group() as group:
            for db, reply in zip(replicas, ("one", "two"), strict=True):
                group.start_soon(replica, db, reply)
        listed, total = await PgCache(replicas[1]).entries("extract", None, 50, 0)
        assert total == 20 and {e["hits"] for e in listed} == {10}   # every hit of both replicas counted
        assert len({await PgCache(db).reader().get(("extract", "k0")) for db in replicas}) == 1   # one reply kept
    finally:
        for db in replicas:
            db.close()
