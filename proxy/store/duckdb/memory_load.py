"""Reading the in-memory rows and the graph's edges from DuckDB at start-up, streamed through Arrow
(the statements are written once, proxy/store/sql_memory_load.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from proxy.store.duckdb.connection import Con, relation_ready
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_memory_load import EDGES, weights
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


def graph_edges(con: Con) -> tuple[np.ndarray, list[float]]:
    """The graph's edges (``sql_memory_load.EDGES``), fetched as NumPy columns."""
    result = con.execute(EDGES).fetchnumpy()
    ends = np.stack([np.asarray(result["s"], dtype=np.int64), np.asarray(result["t"], dtype=np.int64)], axis=1)
    return ends, weights(np.asarray(result["weight"], dtype=np.float64).tolist())
