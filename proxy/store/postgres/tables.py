"""The PostgreSQL backend's tables (``store.tables``): one knowledge base's schema on a shared
server. What the store needs to keep its in-memory rows and graph in step with the tables, the
change log other replicas' commits arrive by, and one object per subject for everything else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio.to_thread
import numpy as np

from proxy.store.changes import Changeset, IndexDelta
from proxy.store.postgres.cache import PgCache
from proxy.store.postgres.commit import table_counts, table_keys, write_changes
from proxy.store.postgres.connection import Con, PgDatabase
from proxy.store.postgres.documents import PgDocuments
from proxy.store.postgres.follow import listen
from proxy.store.postgres.graph_rows import PgGraphRows
from proxy.store.postgres.memory_load import graph_edges, load_snapshot
from proxy.store.postgres.merge_lock import MergeLock
from proxy.store.postgres.queue import PgDocumentQueue
from proxy.store.postgres.reembed import PgReembed
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_tables import SqlTables

CHANGES_PAGE = 200   # change-log entries read at a time (each holds a commit's texts)


class PgTables(SqlTables):
    def __init__(self, dsn: str, schema: str, dtype: str) -> None:
        """Connects, creates and migrates the schema: blocking, run it in a worker thread (what both
        backends share is ``proxy/store/sql_tables.py``)."""
        self.db: PgDatabase = PgDatabase(dsn, schema)
        super().__init__(self.db)
        self.dtype = dtype
        self.subjects(documents=PgDocuments(self.db), cache=PgCache(self.db), graph_rows=PgGraphRows(self.db),
                      reembed=PgReembed(self.db, dtype))
        # the edges read with the rows at start-up, in one snapshot (``load_rows_sync``), and its generation
        self._edges: tuple[np.ndarray, list[float]] | None = None
        self.loaded_generation = 0
        self.loaded_counts: dict[str, int] = {}   # vectors per table in that snapshot
        self._merge_lock = MergeLock(dsn, schema)
        self.queue = PgDocumentQueue(self.db)

    # --- what the store keeps in step (blocking ``*_sync`` methods run in worker threads) ---

    def keys_sync(self, table: str) -> np.ndarray:
        return self.db.read_sync(table_keys, table)

    def each_embedding_sync(self, table: str, keys: np.ndarray,
                            receive: Callable[[np.ndarray, np.ndarray], None]) -> None:
        """The vectors are searched in the tables: no index to heal from them."""

    def load_rows_sync(self, rows: MemoryRows) -> None:
        """The rows, and with them (same snapshot) the edges ``graph_edges_sync`` returns next and the
        generation they are of (``loaded_generation``)."""
        self._edges, self.loaded_generation, self.loaded_counts = self.db.read_sync(load_snapshot, rows)

    def graph_edges_sync(self) -> tuple[np.ndarray, list[float]]:
        if self._edges is not None:
            edges, self._edges = self._edges, None
            return edges
        return self.db.read_sync(graph_edges)

    def counts_sync(self) -> dict[str, Any]:
        return self.db.read_sync(table_counts)

    async def commit(self, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
        """One transaction under the knowledge base's advisory lock, logged for the other replicas."""
        return await self.db.write(write_changes, changes, self.dtype)

    def changes_since_sync(self, generation: int) -> list[tuple[int, dict[str, Any]]]:
        """The change log's first entries after ``generation``, oldest first (other replicas' commits)."""
        def read(con: Con) -> list[tuple[int, dict[str, Any]]]:
            return [(int(g), changes) for g, changes in con.execute(
                "SELECT generation, changes FROM change_log WHERE generation > %s ORDER BY generation LIMIT %s",
                [generation, CHANGES_PAGE]).fetchall()]
        return self.db.read_sync(read)

    async def checkpoint(self) -> None:
        await self.db.checkpoint()

    def serve_small_statements(self, on_reopen: Callable[[], None]) -> None:
        """Nothing to switch: the server's connections serve small statements as they are."""

    def merge_turn(self) -> AbstractAsyncContextManager[None]:
        return self._merge_lock.held()

    async def merge_turn_held(self) -> bool:
        return await anyio.to_thread.run_sync(self._merge_lock.held_sync)

    def close(self) -> None:
        self._merge_lock.close()
        self.db.close()

    async def listen(self, on_change: Callable[[], Awaitable[object]]) -> None:
        await listen(self.db.dsn, self.db.schema, on_change)
