"""The PostgreSQL backend's factories (``proxy/store/backends.py`` imports them only when
``GRAPHGATE_STORE`` names a server, so the embedded store needs no psycopg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from proxy.store.postgres.connection import CONNECT_SECONDS, OPEN_ERRORS
from proxy.store.postgres.schema import drop
from proxy.store.postgres.tables import PgTables
from proxy.store.protocols.tables import Tables
from proxy.store.protocols.vectors import Vectors
from proxy.store.vectors_pgvector import PgVectors


def pg_tables(dsn: str, schema: str, dtype: str) -> Tables:
    return PgTables(dsn, schema, dtype)


def pg_vectors(tables: Any, table: str, path: Path, dtype: str) -> Vectors:
    """The table's pgvector index (nothing in the data directory)."""
    return PgVectors(tables, table)


def open_errors() -> tuple[type[BaseException], ...]:
    return OPEN_ERRORS


def drop_schema(dsn: str, schema: str) -> None:
    """A deleted knowledge base's schema, with everything in it. Blocking."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=int(CONNECT_SECONDS)) as con:
        drop(con, schema)
