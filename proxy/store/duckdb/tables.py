"""The DuckDB backend's tables, one object per subject (``store.tables``)."""

from __future__ import annotations

from proxy.store.duckdb.connection import Database


class DuckDBTables:
    def __init__(self, db: Database) -> None:
        self.db = db
