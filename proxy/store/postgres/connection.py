"""PostgreSQL access for one knowledge base (one schema): a pool of connections, everything off the
event loop, the same entry points as the DuckDB backend's ``Database`` (``read``/``write`` and their
``*_sync`` forms taking ``fn(connection, *args)``), so the subjects' code has one shape per backend.

Writes run concurrently, each in its own transaction on a pooled connection: PostgreSQL's row
locks order them. The embedded store's single writer is not needed here, and would hold an upload or
an extraction record behind a merge's commit (0.3-1.3 s at 768 dimensions, its HNSW inserts). Commits
of one knowledge base are ordered wherever they come from by the row of its generation, which each
takes (``bump_generation``) and holds until it ends: generations follow commit order, across
replicas too. Reads run in autocommit, one snapshot per statement, as DuckDB's readers do.

psycopg's errors stop here: a lost or refused connection is tried again for AWAY_SECONDS (a write only
when it failed before its commit), then it is a StorageError (503); a full disk is a 507.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import numpy as np
import psycopg
import psycopg_pool
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg import sql

from proxy.core.errors import StorageError, StoreUnavailable
from proxy.store import sql_meta
from proxy.store.postgres.schema import migrate
from proxy.store.sql_dialect import Dialect, Sql

T = TypeVar("T")
Con = psycopg.Connection
log = logging.getLogger("graphgate.store")

READERS = 4
# the shared SQL (proxy/store/sql_dialect.py) as psycopg and the server run it
DIALECT = Dialect("postgresql", placeholder="%s", member_test="{column} = ANY(?::{type}[])",
                  overlap_test="{column} && ?::{type}[]", byte_length_of="octet_length",
                  dimensions_of="vector_dims", refuses_nul=True, many_on_a_cursor=True,
                  updates_join_by_index=True)
CONNECT_SECONDS = 10.0   # how long opening waits for the server before the store reports it unavailable
# how long a statement is tried again while the server is away: a restart takes a second or two, a
# managed fail-over tens of seconds; past it the request gets a 503 and a document waits for a retry
AWAY_SECONDS = 15.0
PAUSES = (0.05, 0.1, 0.2, 0.5, 1.0)   # between attempts
# recall: pgvector's default ef_search (40) found 0.78-0.85 of the true top 10 on bench/pg_feasibility.py's
# corpus, 128 (USearch's setting in vectors_usearch.py) 0.97-0.99, at 0.8-2 ms a query (docs/postgresql.md)
EF_SEARCH = 128
# what each connection allows: the binary index's searches take four candidates per result, 160 for a
# turn's 40 entities, in one statement up to here (beyond, a transaction sets it for the search)
EF_SEARCH_SESSION = 200
# what opening the tables raises when they cannot be used (the store reports it as StoreUnavailable)
OPEN_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout)


def away(exc: BaseException) -> bool:
    """Whether ``exc`` says the server cannot be reached now (worth trying again: a restart, a
    fail-over, the pool's connections all taken), rather than refusing the statement itself. psycopg
    files many refusals under OperationalError too (a disk full, out of memory, a key too long)."""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.OperationalError) and (
        state is None or state.startswith(("08", "40")) or state in ("57P01", "57P02", "57P03"))


def storage_error(exc: BaseException) -> StorageError:
    """The one place PostgreSQL's failures become GraphGate errors, with a message for a person."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.DiskFull):
        return StorageError(f"the PostgreSQL server's disk is full ({detail}); free some space, then retry",
                            status=507)
    if away(exc):
        return StorageError(f"the knowledge store's PostgreSQL server cannot be reached ({detail}); "
                            "retry in a moment", status=503)
    return StorageError(f"the knowledge store's PostgreSQL server refused the statement: {detail}", status=500)


def quoted(schema: str) -> sql.Composable:
    return sql.Identifier(schema)


class PgDatabase:
    """One knowledge base's schema on a PostgreSQL server. Opening it (blocking: run it in a worker
    thread) creates the schema and migrates it, under an advisory lock so that replicas starting
    together migrate once."""

    dialect = DIALECT

    def __init__(self, dsn: str, schema: str, readers: int = READERS) -> None:
        self.dsn = dsn
        self.schema = schema
        self.failure: str | None = None   # for /rag/health: why the last statement could not reach the server
        bootstrap = psycopg.connect(dsn, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
        try:
            migrate(bootstrap, schema)
        finally:
            bootstrap.close()
        self.pool = psycopg_pool.ConnectionPool(
            dsn, min_size=1, max_size=readers + 1, open=False, name=f"graphgate-{schema}",
            kwargs={"autocommit": True}, configure=self._configure,
            check=psycopg_pool.ConnectionPool.check_connection)
        try:
            self.pool.open(wait=True, timeout=CONNECT_SECONDS)
        except BaseException:
            self.pool.close()
            raise

    def _configure(self, con: Con) -> None:
        con.execute(sql.SQL("SET search_path TO {}, public").format(quoted(self.schema)))
        con.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(EF_SEARCH_SESSION)))
        register_vector(con)

    def close(self) -> None:
        self.pool.close()

    # --- sync entry points (run in worker threads) ---

    def read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(con, *args)``; tried again while the server is away (a restart, a fail-over), for up
        to AWAY_SECONDS."""
        started, attempt = time.monotonic(), 0
        while True:
            try:
                with self.pool.connection(timeout=AWAY_SECONDS) as con:
                    result = fn(con, *args)
                self.failure = None
                return result
            except psycopg_pool.PoolClosed:   # a base being closed or deleted
                raise StoreUnavailable("the knowledge store is closed") from None
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                self._pause_or_fail(exc, started, attempt)
                attempt += 1

    def write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(con, *args)`` in one transaction. Tried again, as reads are, when the connection failed
        before the commit (the transaction was rolled back), never when it failed during the commit:
        that one may have landed."""
        started, attempt = time.monotonic(), 0
        while True:
            committing = False
            try:
                with self.pool.connection(timeout=AWAY_SECONDS) as con:
                    with con.transaction():
                        result = fn(con, *args)
                        committing = True
                self.failure = None
                return result
            except psycopg_pool.PoolClosed:
                raise StoreUnavailable("the knowledge store is closed") from None
            except psycopg.errors.DiskFull as exc:
                error = storage_error(exc)
                self.failure = error.message
                raise error from exc
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                if committing:
                    error = storage_error(exc)
                    self.failure = error.message
                    raise error from exc
                self._pause_or_fail(exc, started, attempt)
                attempt += 1

    def _pause_or_fail(self, exc: BaseException, started: float, attempt: int) -> None:
        """Wait before trying again, or raise StorageError: at once for a statement the server
        refused, once the server has been away too long otherwise."""
        error = storage_error(exc)
        if not away(exc):
            raise error from exc
        self.failure = error.message
        if time.monotonic() - started >= AWAY_SECONDS:
            raise error from exc
        if not attempt:
            log.info("the PostgreSQL server could not be reached (%s); trying again", error.message)
        time.sleep(PAUSES[min(attempt, len(PAUSES) - 1)])

    def checkpoint_sync(self) -> None:
        """PostgreSQL checkpoints on its own; nothing to fold."""

    # --- async entry points ---

    async def checkpoint(self) -> None:
        return None

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self.read_sync, fn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        # shielded: a cancelled caller must not leave a transaction half-way in its thread
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(self.write_sync, fn, *args)
        return result


def vector_array(value: Vector | np.ndarray) -> np.ndarray:
    """A stored embedding as float32 (pgvector's loader gives a ``Vector``)."""
    return value.to_numpy() if isinstance(value, Vector) else np.asarray(value, dtype=np.float32)


def get_meta(con: Con, key: str, default: str | None = None) -> str | None:
    return sql_meta.get_meta(Sql(con, DIALECT), key, default)


def set_meta(con: Con, key: str, value: str | int) -> None:
    sql_meta.set_meta(Sql(con, DIALECT), key, value)


def bump_generation(con: Con) -> int:
    """Every commit that changes indexed data moves the generation on. The row stays locked until
    the transaction ends, so the next commit (of any replica) waits for this one and reads its value:
    generations follow commit order."""
    row = con.execute("UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'generation' "
                      "RETURNING value").fetchone()
    if row is None:
        set_meta(con, "generation", 1)
        return 1
    return int(row[0])
