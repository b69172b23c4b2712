"""Invariants of a knowledge store at rest, checked by opening it again and reading its tables
directly (DuckDB's or PostgreSQL's: the SQL here is what both take)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from proxy.store.backends import EMBEDDED, Backend
from proxy.store.duckdb.connection import Database
from proxy.store.duckdb.tables import DuckDBTables
from proxy.store.protocols.graph import Graph
from proxy.store.rows_memory import MemoryRows
from proxy.store.store import KnowledgeStore


def database(store: KnowledgeStore) -> Database:
    """The embedded backend's DuckDB database behind the store's tables, which tests read directly."""
    if not isinstance(store.tables, DuckDBTables):
        raise TypeError(f"the store's tables are {type(store.tables).__name__}, not the embedded DuckDB ones")
    return store.tables.db


def tables_db(store: KnowledgeStore) -> Any:
    """The connection object behind either backend's tables (``read_sync(fn)`` with ``fn(con)``
    running ``con.execute(sql).fetchall()``), for SQL both engines take."""
    return store.tables.db  # type: ignore[attr-defined]


def in_memory(store: KnowledgeStore) -> tuple[MemoryRows, Graph]:
    """The store's in-memory rows and graph, to compare with its tables (a store at rest)."""
    return store.read_memory_sync(lambda rows, graph: (rows, graph))


def check_store(data_dir: Path, backend: Backend = EMBEDDED) -> dict[str, int]:
    """Open the store as GraphGate would (healing indexes) and assert every cross-store invariant."""
    return anyio.run(_check, data_dir, backend)


async def _check(data_dir: Path, backend: Backend) -> dict[str, int]:
    store = await KnowledgeStore.open(data_dir, backend=backend)
    try:
        return check_open_store(store)
    finally:
        await store.close()


def check_open_store(store: KnowledgeStore) -> dict[str, int]:
    """Every cross-store invariant of an open store at rest (each replica of a shared one)."""
    read = tables_db(store).read_sync
    for table in ("chunks", "entities", "relations"):
        db_keys = {r[0] for r in read(lambda c, t=table: c.execute(f"SELECT key FROM {t}").fetchall())}
        assert {int(k) for k in store.vector_keys_sync(table)} == db_keys, f"{table}: index and table differ"
    names = {r[0] for r in read(lambda c: c.execute("SELECT name_key FROM entities").fetchall())}
    assert in_memory(store)[1].names() == names, "graph vertices differ from entities"
    pairs = {(r[0], r[1]) for r in read(lambda c: c.execute("SELECT source, target FROM relations").fetchall())}
    assert in_memory(store)[1].edge_pairs() == pairs, "graph edges differ from relations"
    chunk_ids = {r[0] for r in read(lambda c: c.execute("SELECT id FROM chunks").fetchall())}
    for table in ("entities", "relations"):
        for (sources,) in read(lambda c, t=table: c.execute(f"SELECT source_ids FROM {t}").fetchall()):
            assert sources and set(sources) <= chunk_ids, f"{table} row without a live source chunk"
    for source, target in pairs:
        assert source in names and target in names, "relation to a missing entity"
    linked = {r[0] for r in read(lambda c: c.execute("SELECT DISTINCT chunk_id FROM document_chunks").fetchall())}
    assert chunk_ids <= linked, "chunk that no document links to"
    rows = in_memory(store)[0]  # the in-memory copy retrieval reads must match the tables too
    assert set(rows.entity_keys) == names and set(rows.relation_keys) == {
        r[0] for r in read(lambda c: c.execute("SELECT pair_key FROM relations").fetchall())}
    assert set(rows.chunk_keys) == chunk_ids
    lowered = read(lambda c: c.execute("SELECT lower(name), count(*) FROM entities GROUP BY 1 HAVING count(*) > 1")
                   .fetchall())
    assert not lowered, f"duplicate entities: {lowered}"
    return {"chunks": len(chunk_ids), "entities": len(names), "relations": len(pairs)}
