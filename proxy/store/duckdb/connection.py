"""DuckDB access: one writer, a small pool of readers, everything off the event loop.

Writes run one at a time, each in a transaction, in a worker thread; readers get their own
cursor (DuckDB's MVCC means a reader sees either all of a commit or none of it).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import duckdb

from proxy.core.errors import StorageError, StoreUnavailable
from proxy.store import sql_meta
from proxy.store.duckdb.creation import ensure_database
from proxy.store.duckdb.schema import migrate
from proxy.store.messages import is_disk_full, without_paths
from proxy.store.sql_dialect import Dialect, Sql

T = TypeVar("T")
Con = duckdb.DuckDBPyConnection
log = logging.getLogger("graphgate.store")

READERS = 4
# the shared SQL (proxy/store/sql_dialect.py) as DuckDB runs it: a list parameter unnested in a
# subquery is joined against the column's index, ``= ANY`` would compare every row
DIALECT = Dialect("duckdb", placeholder="?", member_test="{column} IN (SELECT unnest(?::{type}[]))",
                  overlap_test="list_has_any({column}, ?::{type}[])", byte_length_of="strlen",
                  dimensions_of="len", refuses_nul=False, many_on_a_cursor=False,
                  updates_join_by_index=False)
# DuckDB moves its write-ahead log into the database file (a checkpoint) once the log passes this
# size, and readers wait while it does. At DuckDB's 16 MB that happened every second or two of
# ingestion (bench/ingest.py (a): 100-108 chunks/s; at 32 MB 113-118). A checkpoint holds readers,
# a chat's retrieval too, for its duration, which grows with the log: 70 ms for 32 MB of new rows,
# 200 ms for 64 MB, more when many rows were replaced (seconds at 64 MB). GraphGate also
# checkpoints whenever the pipeline falls idle (``checkpoint``), and the log is small at shutdown.
CHECKPOINT_WAL = "32MB"
# what DuckDB raises when the disk refuses a write (full, read-only, gone); other errors are bugs
WRITE_FAILURES = (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException)
REOPEN_SECONDS = 1.0  # while an invalidated database cannot be reopened (a full disk), try at most this often


def is_fatal(exc: BaseException) -> bool:
    """DuckDB gave up on the database (a checkpoint that hit a full disk): every later statement on
    it fails with "database has been invalidated" until it is closed and opened again."""
    return isinstance(exc, duckdb.FatalException) or (
        isinstance(exc, duckdb.Error) and "database has been invalidated" in str(exc))


def storage_error(exc: duckdb.Error) -> StorageError:
    """The one place DuckDB's write failures become GraphGate errors, with a message for a person
    (the file's name, not where it is on the server: the log says that)."""
    detail = without_paths(str(exc).split("Error: ", 1)[-1])
    if is_disk_full(detail):
        return StorageError(f"the disk holding the data directory is full ({detail}); free some space, "
                            "then retry", status=507)
    return StorageError(f"the knowledge store could not write: {detail}")


def _unusable(reason: str) -> StorageError:
    """The error for a request that met an invalidated database (507 when the disk is full)."""
    full = "is full" in reason
    return StorageError(reason if full else f"the knowledge store is being reopened after a fatal error ({reason}); "
                        "retry in a moment", status=507 if full else 503)


def relation_ready(con: Con) -> Con:
    """``con``, its previous execute() result closed: DuckDB 2 refuses con.sql() while one is still
    open (a fetchone() leaves it so), and pooled cursors are shared."""
    finish = getattr(con, "complete", None)
    if finish is not None:
        finish()
    return con


class Database:
    """DuckDB invalidates a database after a fatal error (a checkpoint that hit a full disk), and
    then refuses every statement until it is reopened. The database is then closed and opened
    again from its file and write-ahead log (nothing committed is lost) by the request that meets
    it; while that fails (the disk still full) every read and write raises StorageError (507 or
    503), never DuckDB's error, and ``failure`` says why, for /rag/health."""

    dialect = DIALECT

    def __init__(self, path: Path, memory_limit: str = "1GB") -> None:
        self.path = path
        self.memory_limit = memory_limit
        self.threads: int | None = None  # SET threads, kept across a reopen
        self.failure: str | None = None  # why the database is unusable right now (None: it is fine)
        self.reopened = 0  # times it was reopened after being invalidated
        self.on_reopen: Callable[[], None] | None = None  # called after a reopen (writers still held)
        self._last_try = 0.0
        self._incarnation = 0
        self._gate = threading.Condition()  # readers in, against a reopen closing their cursors
        self._reading = 0
        self._reopening = False
        # made whole or not at all: a creation that failed (a full disk) is made again at the next opening
        ensure_database(path, self._config(), migrate)
        self._open()
        self.write_lock = anyio.Lock()
        self._thread_lock = threading.RLock()  # also guards the sync entry points used by the CLI

    def _config(self) -> dict[str, str | bool | int | float | list[str]]:
        # DuckDB would otherwise cache up to 80 % of the machine's memory: this is a laptop app
        return {"memory_limit": self.memory_limit, "checkpoint_threshold": CHECKPOINT_WAL}

    def _open(self) -> None:
        con = duckdb.connect(str(self.path), config=self._config())
        try:
            migrate(con)
            if self.threads is not None:
                con.execute(f"SET threads = {int(self.threads)}")
            readers: queue.SimpleQueue[Con | None] = queue.SimpleQueue()
            for _ in range(READERS):
                readers.put(con.cursor())
        except BaseException:
            con.close()
            raise
        self.con, self._readers = con, readers

    def set_threads(self, threads: int) -> None:
        self.con.execute(f"SET threads = {int(threads)}")
        self.threads = threads

    def close(self) -> None:
        while not self._readers.empty():
            cursor = self._readers.get()
            if cursor is not None:
                cursor.close()
        # a read that comes after (a base being closed or deleted) finds the store closed: None,
        # never an empty queue it would wait on for good
        for _ in range(READERS):
            self._readers.put(None)
        self.con.close()

    # --- an invalidated database ---

    def _lost(self, exc: BaseException, incarnation: int) -> None:
        """``exc`` (fatal) came from the database opened as ``incarnation``: reopen it, unless done
        meanwhile. Called with no cursor held."""
        with self._thread_lock:
            if incarnation == self._incarnation and self.failure is None:
                self.failure = str(storage_error(exc))  # type: ignore[arg-type]
                log.warning("the knowledge store's database was invalidated by DuckDB (%s); reopening it",
                          str(exc).replace("\n", " "))
            self._try_reopen(force=incarnation == self._incarnation)

    def _try_reopen(self, *, force: bool = False) -> None:
        """With ``_thread_lock`` held: close and open the database again, at most every
        REOPEN_SECONDS unless ``force``; ``failure`` says why, when it cannot."""
        if self.failure is None or (not force and time.monotonic() - self._last_try < REOPEN_SECONDS):
            return
        self._last_try = time.monotonic()
        with self._gate:
            self._reopening = True
            while self._reading:
                self._gate.wait()
        try:
            with contextlib.suppress(Exception):
                self.close()
            try:
                self._open()
            except (duckdb.Error, OSError) as exc:
                self.failure = str(storage_error(exc)) if isinstance(exc, duckdb.Error) else (
                    f"the knowledge store cannot be opened again: {exc}")
                log.warning("the knowledge store could not be reopened yet: %s", self.failure)
                return
            self._incarnation += 1
            self.failure = None
            self.reopened += 1
            log.warning("the knowledge store's database was reopened from its file and log")
        finally:
            with self._gate:
                self._reopening = False
                self._gate.notify_all()
        if self.on_reopen is not None:
            self.on_reopen()

    def _usable(self) -> int:
        """The incarnation to use, reopening first if the database was lost; StorageError if it
        cannot be (the disk is still full)."""
        if self.failure is not None:
            with self._thread_lock:
                self._try_reopen()
                if self.failure is not None:
                    raise _unusable(self.failure)
        return self._incarnation

    # --- sync entry points (run in worker threads) ---

    def read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        for attempt in range(2):  # once more on the database reopened after a fatal error
            incarnation = self._usable()
            with self._gate:
                while self._reopening:
                    self._gate.wait()
                self._reading += 1
                readers = self._readers
            try:
                cursor = readers.get()
                if cursor is None:
                    readers.put(None)
                    raise StoreUnavailable("the knowledge store is closed")
                try:
                    return fn(cursor, *args)
                finally:
                    # a result left open (a fetchone(), a streamed reader) keeps its transaction open, and
                    # the idle checkpoint failed on it ("other write transactions active")
                    try:
                        with contextlib.suppress(duckdb.Error):
                            relation_ready(cursor)
                    finally:
                        readers.put(cursor)
            except duckdb.Error as exc:
                if not is_fatal(exc):
                    raise
                fatal = exc
            finally:
                with self._gate:
                    self._reading -= 1
                    self._gate.notify_all()
            self._lost(fatal, incarnation)
            if self.failure is not None or attempt:
                raise _unusable(self.failure or str(storage_error(fatal))) from fatal
        raise AssertionError("unreachable")

    def write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        with self._thread_lock:
            incarnation = self._usable()
            try:
                self.con.execute("BEGIN TRANSACTION")
                result = fn(self.con, *args)
                self.con.execute("COMMIT")
                return result
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already ended it
                    self.con.execute("ROLLBACK")
                if is_fatal(exc):
                    # not tried again: a COMMIT whose automatic checkpoint failed is in the log
                    self._lost(exc, incarnation)
                    raise _unusable(str(storage_error(exc))) from exc  # type: ignore[arg-type]
                if isinstance(exc, WRITE_FAILURES):
                    raise storage_error(exc) from exc
                raise

    def checkpoint_sync(self) -> None:
        with self._thread_lock:
            incarnation = self._usable()
            try:
                self.con.execute("CHECKPOINT")
            except duckdb.Error as exc:
                if not is_fatal(exc):
                    raise
                self._lost(exc, incarnation)
                raise _unusable(str(storage_error(exc))) from exc

    # --- async entry points ---

    async def checkpoint(self) -> None:
        """Write the log into the database file now, at a quiet moment (readers wait meanwhile).
        DuckDB refuses while it counts another transaction as open (``read_sync`` closes every
        result a read leaves, which it otherwise did)."""
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.checkpoint_sync)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self.read_sync, fn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.write_lock:
            # shielded: a cancelled caller must not leave a transaction half-way in its thread
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(self.write_sync, fn, *args)
        return result


def get_meta(con: Con, key: str, default: str | None = None) -> str | None:
    return sql_meta.get_meta(Sql(con, DIALECT), key, default)


def set_meta(con: Con, key: str, value: str | int) -> None:
    sql_meta.set_meta(Sql(con, DIALECT), key, value)


def bump_generation(con: Con) -> int:
    """Every commit that changes indexed data moves the generation (and the KB version) on."""
    generation = int(get_meta(con, "generation", "0") or 0) + 1
    set_meta(con, "generation", generation)
    return generation
