"""The tables: the store's source of truth. A backend (DuckDB today: ``proxy/store/duckdb/``)
offers what the store needs to keep its vector indexes and graph in step with the tables (the
methods below), and one object per subject, each with its own small protocol in this folder."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import numpy as np

from proxy.store.changes import Changeset, IndexDelta
from proxy.store.protocols.cache import CacheTables
from proxy.store.protocols.communities import CommunityTables
from proxy.store.protocols.documents import DocumentTables
from proxy.store.protocols.graph_rows import GraphRows
from proxy.store.protocols.reembed import ReembedTables
from proxy.store.protocols.retrieval_rows import RetrievalRows
from proxy.store.protocols.traces import TraceTables
from proxy.store.rows_memory import MemoryRows


class Tables(Protocol):
    """``store.tables``. Blocking ``*_sync`` methods run in worker threads."""

    documents: DocumentTables
    cache: CacheTables
    traces: TraceTables
    graph_rows: GraphRows
    reembed: ReembedTables
    retrieval_rows: RetrievalRows
    communities: CommunityTables

    def meta_sync(self, key: str, default: str | None = None) -> str | None: ...

    async def meta(self, key: str, default: str | None = None) -> str | None: ...

    def keys_sync(self, table: str) -> np.ndarray:
        """Every vector key of a table with a vector index ("chunks", "entities", "relations",
        "communities")."""

    def each_embedding_sync(self, table: str, keys: np.ndarray,
                            receive: Callable[[np.ndarray, np.ndarray], None]) -> None:
        """``receive(keys, vectors)`` for the stored embeddings of ``keys``, a batch at a time."""

    def load_rows_sync(self, rows: MemoryRows) -> None:
        """Fill empty in-memory rows from the tables (start-up)."""

    def load_chunk_documents_sync(self, rows: MemoryRows, chunk_ids: list[str]) -> None:
        """The document names of ``chunk_ids`` into ``rows`` (after a commit)."""

    def graph_edges_sync(self) -> tuple[np.ndarray, list[float]]:
        """Every relation as a pair of vertex numbers (entities numbered in key order) and its weight."""

    def counts_sync(self) -> dict[str, Any]: ...

    async def commit(self, changes: Changeset) -> tuple[dict[str, IndexDelta], int]:
        """One transaction through the single writer: per indexed table the vector keys added
        and removed, and the new generation."""

    async def checkpoint(self) -> None: ...

    def serve_small_statements(self, on_reopen: Callable[[], None]) -> None:
        """Start-up is over; ``on_reopen`` runs if the tables had to be reopened after a failure."""

    def close(self) -> None: ...


class DocumentQueue(Protocol):
    """Unfinished documents claimed by one replica at a time, with a lease it renews."""

    async def claim(self, document_id: str, owner: str, seconds: float) -> bool: ...

    async def claim_next(self, owner: str, seconds: float, limit: int) -> list[str]: ...

    async def renew(self, owner: str, document_ids: list[str], seconds: float) -> list[str]: ...


class SharedTables(Tables, Protocol):
    """Tables several replicas commit to (PostgreSQL): each replica replays the others' commits from
    the change log into its in-memory rows, graph and keyword indexes."""

    loaded_generation: int   # the generation ``load_rows_sync`` read the rows at
    queue: DocumentQueue

    def changes_since_sync(self, generation: int) -> list[tuple[int, dict[str, Any]]]:
        """The change log's first entries after ``generation`` (a page), oldest first."""

    async def listen(self, on_change: Callable[[], Awaitable[object]]) -> None:
        """Call ``on_change`` whenever another replica may have committed (and now and then regardless,
        in case a notification was missed); runs until cancelled, reconnecting as needed."""

    def merge_turn(self) -> AbstractAsyncContextManager[None]:
        """Held by one replica at a time (across replicas) while it prepares and commits a merge or an
        edit of the graph: what it reads to prepare is then what it commits over."""

    async def merge_turn_held(self) -> bool:
        """Whether this replica's merge turn is still held (its connection to the server alive)."""
