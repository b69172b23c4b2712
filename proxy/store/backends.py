"""The engines a store is built from. The embedded backend (DuckDB tables, USearch vector indexes,
an igraph graph, all in the data directory) is the default; the PostgreSQL backend (tables and
pgvector indexes on a server shared by several replicas, the graph in each replica's memory) is
chosen by ``GRAPHGATE_STORE``. A backend is a folder of files implementing the protocols in
``proxy/store/protocols/`` plus one entry here."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.store.duckdb.tables import OPEN_ERRORS, DuckDBTables
from proxy.store.graph_igraph import EntityGraph
from proxy.store.keywords_bm25 import Bm25Index
from proxy.store.protocols.graph import Graph
from proxy.store.protocols.keywords import KeywordIndex
from proxy.store.protocols.tables import Tables
from proxy.store.protocols.vectors import Vectors
from proxy.store.vectors_usearch import VectorIndex


@dataclass(frozen=True)
class Backend:
    name: str
    open_tables: Callable[[Path, str, str], Tables]  # (data dir, memory limit, element type); blocking, migrates
    open_errors: tuple[type[BaseException], ...]  # what open_tables raises when it cannot open them
    new_vectors: Callable[[Any, str, Path, str], Vectors]  # (tables, table, index file, element type)
    new_graph: Callable[[], Graph]
    new_keywords: Callable[[Path, float], KeywordIndex]  # (index folder, BM25's b); loaded or built later
    # several replicas commit to the same tables: each replays the others' commits (``ReplicaFollowing.follow``)
    shared: bool = False


def _duckdb(path: Path, memory_limit: str, dtype: str) -> Tables:
    return DuckDBTables(path, memory_limit)


def _usearch(tables: Any, table: str, path: Path, dtype: str) -> Vectors:
    return VectorIndex(path, dtype)


EMBEDDED = Backend("embedded", _duckdb, OPEN_ERRORS, _usearch, EntityGraph, Bm25Index)


def postgresql(dsn: str, schema: str) -> Backend:
    """One knowledge base's schema on the PostgreSQL server at ``dsn`` (``GRAPHGATE_STORE``)."""
    from proxy.store.postgres.backend import open_errors, pg_tables, pg_vectors  # psycopg: the postgresql extra

    return Backend("postgresql", lambda _path, _memory, dtype: pg_tables(dsn, schema, dtype), open_errors(),
                   pg_vectors, EntityGraph, Bm25Index, shared=True)


def schema_name(kb: str) -> str:
    """A knowledge base's PostgreSQL schema (its name is lowercase letters, digits, '-' and '_', up to
    64 of them). PostgreSQL cuts identifiers at 63 bytes, which would give two long names sharing
    their first 60 characters one schema: those past 60 end in a hash of the whole name instead."""
    if len(kb) <= 60:
        return f"kb_{kb}"
    return f"kb_{kb[:43]}_{hashlib.sha256(kb.encode()).hexdigest()[:16]}"


def backend_for(store: str, kb: str) -> Backend:
    """The backend ``GRAPHGATE_STORE`` names, for knowledge base ``kb``."""
    return EMBEDDED if store == "embedded" else postgresql(store, schema_name(kb))


def drop_base_sync(store: str, kb: str) -> None:
    """Remove what a deleted knowledge base keeps outside its directory: its PostgreSQL schema.
    Blocking. The embedded store keeps everything in the directory."""
    if store != "embedded":
        from proxy.store.postgres.backend import drop_schema

        drop_schema(store, schema_name(kb))

