"""What can be known about a store before anything opens it, so that a command that cannot run says
so in a sentence rather than fail in the middle of its start-up (``graphgate serve``'s lifespan):
whether PostgreSQL's client is installed (the ``postgresql`` extra), and which process, if any,
holds the embedded store's database (DuckDB lets one process at a time open it for writing)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import duckdb

from proxy.core.data_dir import DATABASE_FILE

# what the PostgreSQL backend imports (proxy/store/postgres/, vectors_pgvector.py)
POSTGRESQL_CLIENT = ("psycopg", "psycopg_pool", "pgvector.psycopg")
EXTRA = "pip install 'graphgate[postgresql]'"
LOCK_HOLDER = re.compile(r"Conflicting lock is held in .*?\(PID (\d+)\)", re.S)


def missing_postgresql_client() -> str | None:
    """The first module of PostgreSQL's client this installation cannot import, or None."""
    for module in POSTGRESQL_CLIENT:
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def store_lock_holder(data_dir: Path) -> int | None:
    """The process id of whoever holds the embedded store's database at ``data_dir`` (0 when DuckDB
    does not say), or None: no database yet, free, or not openable for another reason (which the
    store's own opening then reports). Opens the database for a moment; blocking."""
    path = data_dir / DATABASE_FILE
    try:
        if path.stat().st_size == 0:   # a creation cut short: the store's opening makes it again
            return None
    except OSError:
        return None
    try:
        duckdb.connect(str(path), config={"memory_limit": "64MB"}).close()
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" not in text.lower():
            return None
        found = LOCK_HOLDER.search(text)
        return int(found.group(1)) if found else 0
    except duckdb.Error:
        return None
    return None
