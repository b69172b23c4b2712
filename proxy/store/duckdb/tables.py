"""The DuckDB backend's tables (``store.tables``): what the store needs to keep its vector
indexes and graph in step with the tables, and one object per subject for everything else (what
both backends share is ``proxy/store/sql_tables.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from proxy.store.changes import Changeset, IndexDelta
from proxy.store.duckdb.cache import DuckDBCache
from proxy.store.duckdb.commit import embeddings_for, table_counts, table_keys, write_changes
from proxy.store.duckdb.connection import Database
from proxy.store.duckdb.documents import DuckDBDocuments
from proxy.store.duckdb.graph_rows import DuckDBGraphRows
from proxy.store.duckdb.memory_load import graph_edges, load_rows
from proxy.store.duckdb.reembed import DuckDBReembed
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_tables import SqlTables

FILE_NAME = "graphgate.duckdb"
# what opening the tables raises when they cannot be used (the store reports it as StoreUnavailable)
OPEN_ERRORS: tuple[type[BaseException], ...] = (duckdb.Error, OSError)


class DuckDBTables(SqlTables):
    def __init__(self, data_dir: Path, memory_limit: str) -> None:
        """Opens (and migrates) the database: blocking, run it in a worker thread."""
        self.db: Database = Database(data_dir / FILE_NAME, memory_limit)
        super().__init__(self.db)
        self.subjects(documents=DuckDBDocuments(self.db), cache=DuckDBCache(self.db),
                      graph_rows=DuckDBGraphRows(self.db), reembed=DuckDBReembed(self.db))

    # --- what the store keeps in step (blocking ``*_sync`` methods run in worker threads) ---

    def keys_sync(self, table: str) -> np.ndarray:
        return self.db.read_sync(table_keys, table)

    def each_embedding_sync(self, table: str, keys: np.ndarray,
                            receive: Callable[[np.ndarray, np.ndarray], None]) -> None:
        """``receive(keys, vectors)`` for the stored embeddings of ``keys``, a batch at a time."""
        def each(con: duckdb.DuckDBPyConnection) -> None:
            for batch_keys, vectors in embeddings_for(con, table, keys):
                receive(batch_keys, vectors)

        self.db.read_sync(each)

    def load_rows_sync(self, rows: MemoryRows) -> None:
        self.db.read_sync(load_rows, rows)

    def graph_edges_sync(self) -> tuple[np.ndarray, list[float]]:
        return self.db.read_sync(graph_edges)

    def counts_sync(self) -> dict[str, Any]:
        return self.db.read_sync(table_counts)

    async def commit(self, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
        """One transaction through the single writer: the vector keys added and removed per
        indexed table, and the new generation."""
        return await self.db.write(write_changes, changes)

    async def checkpoint(self) -> None:
        await self.db.checkpoint()

    def serve_small_statements(self, on_reopen: Callable[[], None]) -> None:
        """Start-up is over: from here on the tables serve many small statements. ``on_reopen``
        runs when the database had to be reopened after DuckDB invalidated it."""
        # With worker threads each statement wakes them, and the context switches cost 12 % of the
        # CPU per ingested chunk (bench/ingest.py); the big start-up scans keep them.
        self.db.set_threads(1)
        self.db.on_reopen = on_reopen

    def close(self) -> None:
        self.db.close()
