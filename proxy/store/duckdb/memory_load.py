"""Reading the in-memory rows and the graph's edges from the tables: all of them at start-up, the
document names of some chunks after a commit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from proxy.store.duckdb.connection import Con, relation_ready
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_memory_load import load_rows as shared_load_rows

BATCH = 20_000  # rows converted at a time: one big fetchall leaves its freed memory to the process


def fetch_rows(con: Con, query: str, args: list[Any] | None = None) -> Iterator[tuple[Any, ...]]:
    """The query's rows as tuples, converted a batch at a time column by column through Arrow
    (2-3x faster than DuckDB's row-wise fetch for millions of rows)."""
    for batch in relation_ready(con).sql(query, params=args or None).to_arrow_reader(BATCH):
        yield from zip(*[column.to_pylist() for column in batch.columns], strict=True)


def load_rows(con: Con, rows: MemoryRows) -> None:
    """Fill empty ``rows`` from the tables (``sql_memory_load.load_rows``, this backend's streaming)."""
    shared_load_rows(con, rows, fetch_rows)


def load_chunk_documents(con: Con, rows: MemoryRows, chunk_ids: list[str]) -> None:
    """The document names of ``chunk_ids`` after a commit (only their links, never the whole table)."""
    if not chunk_ids:
        return
    pairs = con.execute("SELECT dc.chunk_id, d.name FROM document_chunks dc JOIN documents d "
                        "ON d.id = dc.document_id WHERE dc.chunk_id = ANY(?::VARCHAR[])", [chunk_ids]).fetchall()
    rows.load_documents(pairs, chunk_ids)


def graph_edges(con: Con) -> tuple[np.ndarray, list[float]]:
    """Every relation as a pair of vertex numbers (entities numbered in key order, as ``load_rows``
    reads them) and its weight: the join runs in DuckDB, not over a million Python strings."""
    result = con.execute("""
        WITH vertex AS (SELECT name_key, row_number() OVER (ORDER BY key) - 1 AS i FROM entities)
        SELECT s.i AS s, t.i AS t, r.weight FROM relations r
        JOIN vertex s ON s.name_key = r.source JOIN vertex t ON t.name_key = r.target""").fetchnumpy()
    ends = np.stack([np.asarray(result["s"], dtype=np.int64), np.asarray(result["t"], dtype=np.int64)], axis=1)
    shared: dict[float, float] = {}  # few distinct weights: one float object each, not one per edge
    return ends, [shared.setdefault(w, w) for w in np.asarray(result["weight"], dtype=np.float64).tolist()]
