"""The documents' tables in PostgreSQL: a document's status (which also ends a replica's lease),
the engine's errors and the server's health (the rest is written once, proxy/store/sql_documents.py)."""

from __future__ import annotations

import sys

import psycopg

from proxy.core.errors import GraphGateError
from proxy.store.clock import now
from proxy.store.postgres.connection import Con, PgDatabase, set_meta
from proxy.store.protocols.documents import STATUSES, StorageCondition, StorageHealth
from proxy.store.sql_dialect import Sql
from proxy.store.sql_documents import SqlDocuments, status_counts

HEALTH_KEY = "health_probe"   # the meta row health_sync writes to learn that writes are taken


def set_status(sql: Sql, document_id: str, status: str, error: str | None = None) -> None:
    # a document failed or sent back to pending is no replica's any more (proxy/store/postgres/queue.py)
    sql.execute("UPDATE documents SET status = ?, error = ?, updated_at = ?, "
                "lease_owner = CASE WHEN ? = 'processing' THEN lease_owner END, "
                "lease_until = CASE WHEN ? = 'processing' THEN lease_until END WHERE id = ?",
                [status, error, now(), status, status, document_id])


def stored_bytes(sql: Sql) -> int:
    """What the knowledge base's tables take on the server (its schema's tables with their indexes
    and TOAST): the other bases of the database are not its."""
    return int(sql.one("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                       "JOIN pg_namespace n ON n.oid = c.relnamespace "
                       "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"))


def takes_writes(con: Con) -> bool:
    """Whether the server commits a write to this base: a meta row, written in autocommit (its own
    transaction, no lock a merge holds). A read-only server, a revoked privilege or a full disk
    refuse it; a lost connection is raised, for the reader's retry."""
    try:
        set_meta(con, HEALTH_KEY, now().isoformat())
    except psycopg.Error:
        if con.broken:
            raise
        return False
    return True


def _health(sql: Sql) -> tuple[dict[str, int], bool, int]:
    return status_counts(sql), takes_writes(sql.con), stored_bytes(sql)


class PgDocuments(SqlDocuments):
    """``DocumentTables`` over PostgreSQL."""

    # psycopg's errors that the connection does not translate (it turns a lost server into StorageError)
    read_errors: tuple[type[BaseException], ...] = (psycopg.Error, GraphGateError)
    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db

    def health_sync(self) -> StorageHealth:
        """The embedded store checks its data directory's permissions and free space; a server store
        has no directory of ours. ``writable``: the server committed a write to this base just now
        (not through the writer: a probe must not queue behind a merge's lock). ``free_bytes``:
        None, the server's disk is not visible to a client (its DiskFull reaches requests as 507);
        ``stored_bytes`` says what the base takes instead."""
        counts, writable, size = self.read_sync(_health)
        documents = {status: int(counts.get(status, 0)) for status in STATUSES}
        documents["total"] = sum(documents.values())
        return StorageHealth(documents, writable, None, stored_bytes=size)

    def condition(self) -> StorageCondition:
        # a server store is never reopened: a lost server is retried per statement by the pool
        return StorageCondition(self.db.failure, 0)
