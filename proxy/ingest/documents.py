"""Moved to proxy/store/duckdb/documents.py (``store.tables.documents``): this name stays only while
the last importers move (it goes once ``grep -rn "ingest.documents\|ingest import documents"`` is empty)."""

from __future__ import annotations

from proxy.store.duckdb.documents import *  # noqa: F403
from proxy.store.duckdb.documents import STATUSES  # noqa: F401
from proxy.store.duckdb.cache import cached_responses, write_cache  # noqa: F401
