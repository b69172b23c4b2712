"""The knowledge base's merge lock across replicas: PostgreSQL's session advisory lock, held on a
connection of its own for as long as one replica prepares and commits merges or an edit. The
server releases it when that connection ends, so a replica that dies (SIGKILL) never leaves it taken.

Within a replica it is re-entrant (PostgreSQL counts a session's locks): the merger holds it from
batch to batch while an edit, already serialised with the merger by the merger's own lock, takes it
again; each release gives back one."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread
import psycopg

from proxy.core.errors import StorageError
from proxy.store.postgres.connection import AWAY_SECONDS, CONNECT_SECONDS, PAUSES, storage_error


class MergeLock:
    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.key = f"graphgate-merge:{schema}"
        self._con: psycopg.Connection | None = None
        self._thread_lock = threading.Lock()   # the connection: one statement at a time
        self._holders = 0   # this replica's holds, all on the connection ``_con`` was when the first was taken
        self._session = 0   # moves on with every new connection: holds of an older one are gone

    def _take_sync(self) -> None:
        """Blocks until granted; tried again on a fresh connection while the server is away (a
        restart), for up to AWAY_SECONDS. A hold taken again while an earlier one of this replica
        was lost with its connection is refused: the merger lets its turn go first (``held_sync``)."""
        started, attempt = time.monotonic(), 0
        with self._thread_lock:
            while True:
                try:
                    if self._con is None or self._con.closed:
                        if self._holders:
                            raise StorageError("the knowledge base's merge turn was lost with its connection to "
                                               "PostgreSQL; retry in a moment")
                        self._con = psycopg.connect(self.dsn, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
                        self._session += 1
                    self._con.execute("SELECT pg_advisory_lock(hashtext(%s))", [self.key])
                    self._holders += 1
                    return
                except psycopg.OperationalError as exc:
                    self._drop()
                    if time.monotonic() - started >= AWAY_SECONDS:
                        raise storage_error(exc) from exc
                    time.sleep(PAUSES[min(attempt, len(PAUSES) - 1)])
                    attempt += 1

    def _release_sync(self) -> None:
        with self._thread_lock:
            self._holders = max(0, self._holders - 1)
            try:
                if self._con is not None and not self._con.closed:
                    self._con.execute("SELECT pg_advisory_unlock(hashtext(%s))", [self.key])
            except psycopg.OperationalError:
                self._drop()   # the lock went with the connection

    def held_sync(self) -> bool:
        """Whether this replica's holds are still the server's (their connection alive)."""
        with self._thread_lock:
            if not self._holders or self._con is None or self._con.closed:
                return False
            try:
                self._con.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                self._drop()
                return False

    def _drop(self) -> None:
        if self._con is not None:
            with contextlib.suppress(psycopg.Error):
                self._con.close()
        self._con = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        with anyio.CancelScope(shield=True):   # a thread waiting for the lock cannot be abandoned
            await anyio.to_thread.run_sync(self._take_sync)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._release_sync)

    def close(self) -> None:
        with self._thread_lock:
            self._drop()
