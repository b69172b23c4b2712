"""Filling the in-memory rows from either backend's tables: the same statements, read through the
backend's own way of streaming a query's rows (``fetch_rows``: DuckDB's Arrow batches, PostgreSQL's
server-side cursor)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from proxy.store.rows_memory import ChunkDocumentRow, MemoryRows
from proxy.store.sql_dialect import Sql

Fetch = Callable[..., Iterator[tuple[Any, ...]]]   # (connection, query, *args) -> its rows, streamed


def load_rows(con: Any, rows: MemoryRows, fetch_rows: Fetch) -> None:
    """Fill empty ``rows`` from the tables. The generators run one after the other (one connection)."""
    rows.load(fetch_rows(con, "SELECT id, key FROM chunks"),
              fetch_rows(con, "SELECT key, name_key, name, type, source_ids FROM entities ORDER BY key"),
              fetch_rows(con, "SELECT key, pair_key, keywords, weight, source_ids FROM relations"),
              _all_chunk_documents(con, fetch_rows))


def _all_chunk_documents(con: Any, fetch_rows: Fetch) -> Iterator[ChunkDocumentRow]:
    # plain pairs, grouped in Python: a GROUP BY over a million chunk ids costs DuckDB seconds
    names: dict[str, str] = dict(con.execute("SELECT id, name FROM documents").fetchall())
    for chunk_id, document_id in fetch_rows(con, "SELECT chunk_id, document_id FROM document_chunks"):
        yield chunk_id, names.get(document_id)


def load_chunk_documents(sql: Sql, rows: MemoryRows, chunk_ids: list[str]) -> None:
    """The document names of ``chunk_ids`` after a commit (only their links, never the whole table)."""
    if not chunk_ids:
        return
    pairs = sql.execute("SELECT dc.chunk_id, d.name FROM document_chunks dc JOIN documents d "
                        f"ON d.id = dc.document_id WHERE {sql.among('dc.chunk_id', 'text')}", [chunk_ids]).fetchall()
    rows.load_documents(pairs, chunk_ids)


# every relation as a pair of vertex numbers (entities numbered in key order, as ``load_rows`` reads
# them) and its weight: the join runs in the engine, not over a million Python strings
EDGES = """
    WITH vertex AS (SELECT name_key, row_number() OVER (ORDER BY key) - 1 AS i FROM entities)
    SELECT s.i AS s, t.i AS t, r.weight FROM relations r
    JOIN vertex s ON s.name_key = r.source JOIN vertex t ON t.name_key = r.target"""


def weights(values: list[float]) -> list[float]:
    """The edges' weights, one float object per distinct weight (few), not one per edge."""
    shared: dict[float, float] = {}
    return [shared.setdefault(w, w) for w in values]
