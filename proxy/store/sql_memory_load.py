"""Filling the in-memory rows from either backend's tables: the same statements, read through the
backend's own way of streaming a query's rows (``fetch_rows``: DuckDB's Arrow batches, PostgreSQL's
server-side cursor)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from proxy.store.rows_memory import ChunkDocumentRow, MemoryRows

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
