"""The engines a store is built from. The embedded backend (DuckDB tables, USearch vector indexes,
an igraph graph, all in the data directory) is the default; another backend is a folder of files
implementing the protocols in ``proxy/store/protocols/`` plus one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxy.store.duckdb.tables import OPEN_ERRORS, DuckDBTables
from proxy.store.graph_igraph import EntityGraph
from proxy.store.keywords_bm25 import KeywordIndex
from proxy.store.protocols.graph import Graph
from proxy.store.protocols.keywords import Keywords
from proxy.store.protocols.tables import Tables
from proxy.store.protocols.vectors import Vectors
from proxy.store.vectors_usearch import VectorIndex


@dataclass(frozen=True)
class Backend:
    name: str
    open_tables: Callable[[Path, str], Tables]  # (data dir, memory limit); blocking, migrates
    open_errors: tuple[type[BaseException], ...]  # what open_tables raises when it cannot open them
    new_vectors: Callable[[Path, str], Vectors]  # (index file, element type); loaded or healed later
    new_graph: Callable[[], Graph]
    new_keywords: Callable[[Path], Keywords]  # (index folder); loaded or built later


EMBEDDED = Backend("embedded", DuckDBTables, OPEN_ERRORS, VectorIndex, EntityGraph, KeywordIndex)
