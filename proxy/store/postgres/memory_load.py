"""Reading the in-memory rows and the graph's edges from PostgreSQL when a replica starts (2.2-2.8 s
at 100k chunks, docs/postgresql.md, measurements), through server-side cursors: psycopg's binary
COPY was no faster here (the statements are written once, proxy/store/sql_memory_load.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from proxy.store.postgres.connection import Con, get_meta
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_memory_load import EDGES, weights
from proxy.store.sql_memory_load import load_rows as shared_load_rows

BATCH = 20_000  # rows fetched at a time: the start-up never holds a whole table twice


def fetch_rows(con: Con, query: str, args: list[Any] | None = None) -> Iterator[tuple[Any, ...]]:
    """The query's rows, a batch at a time through a named (server-side) cursor: inside the
    caller's transaction (``load_snapshot``)."""
    with con.cursor(name="graphgate_load") as cursor:
        cursor.itersize = BATCH
        cursor.execute(query, args)
        yield from cursor


def load_snapshot(con: Con, rows: MemoryRows) -> tuple[tuple[np.ndarray, list[float]], int, dict[str, int]]:
    """Fill empty ``rows``, read the graph's edges, the generation they are of and the number of
    vectors of each table, all from one snapshot: other replicas commit while this one starts, and
    it replays the change log from exactly that generation on."""
    with con.transaction():
        con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        generation = int(get_meta(con, "generation", "0") or 0)
        load_rows(con, rows)
        row = con.execute("SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM entities), "
                          "(SELECT count(*) FROM relations), (SELECT count(*) FROM communities)").fetchone()
        counts = dict(zip(("chunks", "entities", "relations", "communities"), row or (0, 0, 0, 0), strict=True))
        return graph_edges(con), generation, counts


def load_rows(con: Con, rows: MemoryRows) -> None:
    """Fill empty ``rows`` from the tables (``sql_memory_load.load_rows``, this backend's streaming)."""
    shared_load_rows(con, rows, fetch_rows)


def graph_edges(con: Con) -> tuple[np.ndarray, list[float]]:
    """The graph's edges (``sql_memory_load.EDGES``)."""
    rows = con.execute(EDGES).fetchall()
    if not rows:
        return np.empty((0, 2), dtype=np.int64), []
    return np.asarray([(s, t) for s, t, _ in rows], dtype=np.int64), weights([w for _, _, w in rows])
