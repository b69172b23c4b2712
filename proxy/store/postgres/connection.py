"""PostgreSQL access for one knowledge base (one schema): a pool of connections, everything off the
event loop, the same entry points as the DuckDB backend's ``Database`` (``read``/``write`` and their
``*_sync`` forms taking ``fn(connection, *args)``), so the subjects' code has one shape per backend.

Writes of one replica run one at a time (as the embedded store's single writer); across replicas
each write transaction first takes the knowledge base's advisory lock, so commits of one base are
serialised wherever they come from and their generations follow commit order. Reads run in
autocommit, one snapshot per statement, as DuckDB's readers do.

psycopg's errors stop here: a lost or refused connection is a StorageError (503) after one retry of
a read on a fresh connection (the pool checks each connection it hands out, so a restarted server
costs one failed statement at most); a full disk is a 507.
"""

from __future__ import annotations

import logging
import threading
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

from proxy.core.errors import StorageError
from proxy.store.postgres.schema import migrate

T = TypeVar("T")
Con = psycopg.Connection
log = logging.getLogger("graphgate.store")

READERS = 4
CONNECT_SECONDS = 10.0   # how long opening waits for the server before the store reports it unavailable
# recall: pgvector's default ef_search (40) found 0.78-0.85 of the true top 10 on bench/pg_feasibility.py's
# corpus, 128 (USearch's setting in vectors_usearch.py) 0.97-0.99, at 0.8-2 ms a query (docs/postgresql-plan.md)
EF_SEARCH = 128
# what each connection allows: the binary index's searches take four candidates per result, 160 for a
# turn's 40 entities, in one statement up to here (beyond, a transaction sets it for the search)
EF_SEARCH_SESSION = 200
# what opening the tables raises when they cannot be used (the store reports it as StoreUnavailable)
OPEN_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout)


def storage_error(exc: BaseException) -> StorageError:
    """The one place PostgreSQL's failures become GraphGate errors, with a message for a person."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.DiskFull):
        return StorageError(f"the PostgreSQL server's disk is full ({detail}); free some space, then retry",
                            status=507)
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return StorageError(f"the knowledge store's PostgreSQL server cannot be reached ({detail}); "
                            "retry in a moment", status=503)
    return StorageError(f"the knowledge store could not write: {detail}")


def quoted(schema: str) -> sql.Composable:
    return sql.Identifier(schema)


class PgDatabase:
    """One knowledge base's schema on a PostgreSQL server. Opening it (blocking: run it in a worker
    thread) creates the schema and migrates it, under an advisory lock so that replicas starting
    together migrate once."""

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
        self.write_lock = anyio.Lock()
        self._thread_lock = threading.RLock()   # one writer per replica, also for the CLI's sync calls

    def _configure(self, con: Con) -> None:
        con.execute(sql.SQL("SET search_path TO {}, public").format(quoted(self.schema)))
        con.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(EF_SEARCH_SESSION)))
        register_vector(con)

    def close(self) -> None:
        self.pool.close()

    # --- sync entry points (run in worker threads) ---

    def read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        for attempt in range(2):   # once more on a fresh connection: the server may have restarted
            try:
                with self.pool.connection() as con:
                    result = fn(con, *args)
                self.failure = None
                return result
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                if attempt or isinstance(exc, psycopg_pool.PoolTimeout):
                    error = storage_error(exc)
                    self.failure = error.message
                    raise error from exc
        raise AssertionError("unreachable")

    def write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(con, *args)`` in one transaction, holding the knowledge base's advisory lock. Not
        retried: a commit whose answer was lost may have landed."""
        with self._thread_lock:
            try:
                with self.pool.connection() as con, con.transaction():
                    con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [self.schema])
                    result = fn(con, *args)
                self.failure = None
                return result
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.errors.DiskFull) as exc:
                error = storage_error(exc)
                self.failure = error.message
                raise error from exc

    def checkpoint_sync(self) -> None:
        """PostgreSQL checkpoints on its own; nothing to fold."""

    # --- async entry points ---

    async def checkpoint(self) -> None:
        return None

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self.read_sync, fn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.write_lock:
            # shielded: a cancelled caller must not leave a transaction half-way in its thread
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(self.write_sync, fn, *args)
        return result


def vector_array(value: Vector | np.ndarray) -> np.ndarray:
    """A stored embedding as float32 (pgvector's loader gives a ``Vector``)."""
    return value.to_numpy() if isinstance(value, Vector) else np.asarray(value, dtype=np.float32)


def holds_nul(*texts: str | None) -> bool:
    """Whether a value searched for has a NUL character: PostgreSQL's text cannot hold one, so it
    matches no stored row (as in DuckDB) and must not reach the server, which refuses it."""
    return any(text and "\x00" in text for text in texts)


def storable(text: str | None) -> str | None:
    """``text`` as PostgreSQL's text can hold it: a NUL character (which it cannot) as U+FFFD, the
    replacement character, for free text a client sent (a chat's question), never for keys."""
    return text.replace("\x00", "\ufffd") if text else text


def get_meta(con: Con, key: str, default: str | None = None) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = %s", [key]).fetchone()
    return row[0] if row else default


def set_meta(con: Con, key: str, value: str | int) -> None:
    con.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, str(value)])


def bump_generation(con: Con) -> int:
    """Every commit that changes indexed data moves the generation on (under the base's advisory
    lock, so generations follow commit order across replicas)."""
    row = con.execute("UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'generation' "
                      "RETURNING value").fetchone()
    if row is None:
        set_meta(con, "generation", 1)
        return 1
    return int(row[0])


def next_keys(con: Con, count: int) -> list[int]:
    """Vector keys from the schema's sequence: unique across replicas."""
    if count <= 0:
        return []
    return [row[0] for row in con.execute("SELECT nextval('vector_keys') FROM generate_series(1, %s)",
                                          [count]).fetchall()]
