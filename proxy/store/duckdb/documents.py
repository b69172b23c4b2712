"""The documents' tables in DuckDB: a document's status, the engine's errors and the data
directory's health (the rest is written once, proxy/store/sql_documents.py)."""

from __future__ import annotations

import os
import shutil
import sys

import duckdb

from proxy.core.errors import GraphGateError
from proxy.store.clock import now
from proxy.store.duckdb.connection import Database
from proxy.store.protocols.documents import STATUSES, StorageCondition, StorageHealth
from proxy.store.sql_dialect import Sql
from proxy.store.sql_documents import SqlDocuments, status_counts


def set_status(sql: Sql, document_id: str, status: str, error: str | None = None) -> None:
    sql.execute("UPDATE documents SET status = ?, error = ?, updated_at = ? WHERE id = ?",
                [status, error, now(), document_id])


class DuckDBDocuments(SqlDocuments):
    """``DocumentTables`` over DuckDB."""

    read_errors: tuple[type[BaseException], ...] = (duckdb.Error, OSError, GraphGateError)
    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db

    def health_sync(self) -> StorageHealth:
        counts = self.read_sync(status_counts)
        documents = {status: int(counts.get(status, 0)) for status in STATUSES}
        documents["total"] = sum(documents.values())
        database = self.db.path
        folder = database.parent
        writable = os.access(folder, os.W_OK) and (not database.exists() or os.access(database, os.W_OK))
        return StorageHealth(documents, writable, shutil.disk_usage(folder).free)

    def condition(self) -> StorageCondition:
        return StorageCondition(self.db.failure, self.db.reopened)
