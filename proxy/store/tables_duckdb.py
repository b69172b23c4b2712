"""DuckDB access: one writer, a small pool of readers, everything off the event loop.

Writes run one at a time, each in a transaction, in a worker thread; readers get their own
cursor (DuckDB's MVCC means a reader sees either all of a commit or none of it).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import duckdb

from ..errors import StorageError
from .schema import migrate

T = TypeVar("T")
Con = duckdb.DuckDBPyConnection

READERS = 4
# DuckDB moves its write-ahead log into the database file (a checkpoint) once the log passes this
# size, and readers wait while it does. At DuckDB's 16 MB that happened every second or two of
# ingestion (bench/ingest.py (a): 100-108 chunks/s; at 32 MB 113-118). A checkpoint holds readers,
# a chat's retrieval too, for its duration, which grows with the log: 70 ms for 32 MB of new rows,
# 200 ms for 64 MB, more when many rows were replaced (seconds at 64 MB). GraphGate also
# checkpoints whenever the pipeline falls idle (``checkpoint``), and the log is small at shutdown.
CHECKPOINT_WAL = "32MB"
# what DuckDB raises when the disk refuses a write (full, read-only, gone); other errors are bugs
WRITE_FAILURES = (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException)


def storage_error(exc: duckdb.Error) -> StorageError:
    """The one place DuckDB's write failures become GraphGate errors, with a message for a person."""
    detail = str(exc).split("Error: ", 1)[-1]
    if "No space left" in detail or "Disk quota" in detail:
        return StorageError(f"the disk holding the data directory is full ({detail}); free some space, "
                            "then retry", status=507)
    return StorageError(f"the knowledge store could not write: {detail}")


def relation_ready(con: Con) -> Con:
    """``con``, its previous execute() result closed: DuckDB 2 refuses con.sql() while one is still
    open (a fetchone() leaves it so), and pooled cursors are shared."""
    finish = getattr(con, "complete", None)
    if finish is not None:
        finish()
    return con


class Database:
    def __init__(self, path: Path, memory_limit: str = "1GB") -> None:
        self.path = path
        # DuckDB would otherwise cache up to 80 % of the machine's memory: this is a laptop app
        self.con = duckdb.connect(str(path), config={"memory_limit": memory_limit,
                                                     "checkpoint_threshold": CHECKPOINT_WAL})
        migrate(self.con)
        self._readers: queue.SimpleQueue[Con] = queue.SimpleQueue()
        for _ in range(READERS):
            self._readers.put(self.con.cursor())
        self.write_lock = anyio.Lock()
        self._thread_lock = threading.Lock()  # also guards the sync entry points used by the CLI

    def close(self) -> None:
        while not self._readers.empty():
            self._readers.get().close()
        self.con.close()

    # --- sync entry points (run in worker threads) ---

    def read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        cursor = self._readers.get()
        try:
            return fn(cursor, *args)
        finally:
            # a result left open (a fetchone(), a streamed reader) keeps its transaction open, and
            # the idle checkpoint failed on it ("other write transactions active")
            try:
                relation_ready(cursor)
            finally:
                self._readers.put(cursor)

    def write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        with self._thread_lock:
            try:
                self.con.execute("BEGIN TRANSACTION")
                result = fn(self.con, *args)
                self.con.execute("COMMIT")
                return result
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already ended it
                    self.con.execute("ROLLBACK")
                if isinstance(exc, WRITE_FAILURES):
                    raise storage_error(exc) from exc
                raise

    def checkpoint_sync(self) -> None:
        with self._thread_lock:
            self.con.execute("CHECKPOINT")

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
                return await anyio.to_thread.run_sync(self.write_sync, fn, *args)


def get_meta(con: Con, key: str, default: str | None = None) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else default


def set_meta(con: Con, key: str, value: str | int) -> None:
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, str(value)])


def bump_generation(con: Con) -> int:
    """Every commit that changes indexed data moves the generation (and the KB version) on."""
    generation = int(get_meta(con, "generation", "0") or 0) + 1
    set_meta(con, "generation", generation)
    return generation


def next_keys(con: Con, count: int) -> list[int]:
    if count <= 0:
        return []
    return [row[0] for row in con.execute("SELECT nextval('vector_keys') FROM range(?)", [count]).fetchall()]
