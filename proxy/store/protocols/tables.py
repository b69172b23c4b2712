"""The tables: the store's source of truth, by subject. A backend (DuckDB today, PostgreSQL
tomorrow) offers one object per subject; each subject's protocol is its own small file here."""

from __future__ import annotations

from typing import Protocol

from proxy.store.protocols.cache import CacheTables
from proxy.store.protocols.documents import DocumentTables
from proxy.store.protocols.graph_rows import GraphRows
from proxy.store.protocols.reembed import ReembedTables
from proxy.store.protocols.retrieval_rows import RetrievalRows
from proxy.store.protocols.traces import TraceTables


class Tables(Protocol):
    """Every subject's tables of one backend (``store.tables``); one attribute per subject."""
    documents: DocumentTables
    cache: CacheTables
    traces: TraceTables
    graph_rows: GraphRows
    reembed: ReembedTables
    retrieval_rows: RetrievalRows
