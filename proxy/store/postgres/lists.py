"""The gateway's lists (knowledge bases, API keys, knowledge models) in PostgreSQL, shared by every
replica (``proxy/control/lists.py``): one row of ``public.graphgate_lists`` each.

A write is a compare-and-swap on the row's version inside a transaction: the row is read ``FOR
UPDATE`` (and the list's advisory lock taken first, which also serialises the first write of a list
that has no row yet), changed, written with the next version, and a NOTIFY on ``graphgate_lists``
naming the list goes out with the commit. Each replica LISTENs and also polls the versions every
POLL_SECONDS (a notification lost while its connection was down costs at most that delay).

The table is created on first use (under the advisory lock ``schema.py``'s migrations take). A list
with no row yet is imported from this replica's data directory, once, when its file is there: a
store moved by ``graphgate migrate-store --to`` keeps its bases, keys and models. A file that cannot
be read is not imported, and the list is refused (as the file would be) until it is repaired.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg.types.json import Jsonb

from proxy.control.lists import FILES, FileLists, ListConflict, ListUnavailable, StoredList, Unchanged
from proxy.store.postgres.connection import CONNECT_SECONDS
from proxy.store.postgres.follow import POLL_SECONDS, RETRY_SECONDS

log = logging.getLogger("graphgate")

TABLE = "public.graphgate_lists"
CHANNEL = "graphgate_lists"
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    name text PRIMARY KEY,
    body jsonb NOT NULL,
    version bigint NOT NULL,
    updated_at timestamp
)"""


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PgLists:
    """The lists on the PostgreSQL server at ``dsn``; ``data_dir``'s files are imported once."""

    shared = True

    def __init__(self, dsn: str, data_dir: Path) -> None:
        self.dsn = dsn
        self.files = FileLists(data_dir)
        self.ready = False   # the table exists and the files were considered for import
        self.unimported: dict[str, str] = {}   # lists whose file could not be read, and why

    def where(self, name: str) -> str:
        return f"the PostgreSQL list {name!r} ({TABLE})"

    # --- connections ---

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            con = psycopg.connect(self.dsn, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
        except psycopg.Error as exc:
            raise ListUnavailable(f"the PostgreSQL server cannot be reached ({_reason(exc)})") from exc
        try:
            if not self.ready:
                self._prepare(con)
        except BaseException:
            con.close()
            raise
        return con

    def _prepare(self, con: psycopg.Connection[Any]) -> None:
        """The table, created if missing; the lists it has no row of imported from the files."""
        try:
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(hashtext('graphgate-migrate'))")
                con.execute(CREATE)
                present = {row[0] for row in con.execute(f"SELECT name FROM {TABLE}").fetchall()}
                for name in FILES:
                    if name not in present:
                        self._import(con, name)
        except psycopg.Error as exc:
            raise ListUnavailable(f"the lists' table cannot be prepared ({_reason(exc)})") from exc
        self.ready = True

    def _import(self, con: psycopg.Connection[Any], name: str) -> None:
        try:
            document = self.files.read_sync(name)
        except (OSError, ValueError) as exc:
            self.unimported[name] = f"{self.files.where(name)} cannot be read ({exc}), so it was not imported"
            log.error("%s into PostgreSQL: repair it and restart", self.unimported[name])
            return
        if document.body is None:
            return
        con.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 1, now() AT TIME ZONE 'UTC')",
                    [name, Jsonb(document.body)])
        con.execute("SELECT pg_notify(%s, %s)", [CHANNEL, name])
        log.info("imported %s into PostgreSQL (the list %r, shared by every replica from now on)",
                 self.files.where(name), name)

    def _run(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        con = self._connect()
        try:
            return fn(con)
        except psycopg.Error as exc:
            raise ListUnavailable(f"{_reason(exc)}") from exc
        finally:
            con.close()

    # --- reads ---

    def read_sync(self, name: str) -> StoredList:
        row = self._run(lambda con: con.execute(f"SELECT body, version FROM {TABLE} WHERE name = %s",
                                                [name]).fetchone())
        if row is None:
            if name in self.unimported:
                raise ValueError(self.unimported[name])
            return StoredList(None, 0)
        return StoredList(row[0], int(row[1]))

    def versions_sync(self) -> dict[str, int]:
        rows = self._run(lambda con: con.execute(f"SELECT name, version FROM {TABLE}").fetchall())
        return {name: int(version) for name, version in rows}

    # --- writes ---

    def write_sync(self, name: str, body: Any, expected: int) -> StoredList:
        """``body`` as the list's next version, if its version is still ``expected`` (ListConflict)."""
        return self._run(lambda con: self._update(con, name, lambda _: body, expected))

    def update_sync(self, name: str, change: Callable[[Any], Any]) -> StoredList:
        """``change(body)`` written as the next version, in one transaction with the row locked."""
        return self._run(lambda con: self._update(con, name, change))

    def _update(self, con: psycopg.Connection[Any], name: str, change: Callable[[Any], Any],
                expected: int | None = None) -> StoredList:
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"graphgate-list:{name}"])
            row = con.execute(f"SELECT body, version FROM {TABLE} WHERE name = %s FOR UPDATE", [name]).fetchone()
            if row is None and name in self.unimported:
                raise ValueError(self.unimported[name])
            current = StoredList(None, 0) if row is None else StoredList(row[0], int(row[1]))
            if expected is not None and current.version != expected:
                raise ListConflict(f"{self.where(name)} is at version {current.version}, not {expected}")
            try:
                body = change(current.body)
            except Unchanged:
                return current
            version = current.version + 1
            con.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, now() AT TIME ZONE 'UTC') "
                        "ON CONFLICT (name) DO UPDATE SET body = excluded.body, version = excluded.version, "
                        "updated_at = excluded.updated_at", [name, Jsonb(body), version])
            con.execute("SELECT pg_notify(%s, %s)", [CHANNEL, name])
        return StoredList(body, version)

    # --- following ---

    async def listen(self, on_change: Callable[[dict[str, int]], Awaitable[None]]) -> None:
        """Until cancelled: ``on_change(versions)`` after each notification, every POLL_SECONDS, and
        after each (re)connection; reconnects with back-off."""
        failures = 0
        while True:
            try:
                if not self.ready:
                    await anyio.to_thread.run_sync(self._run, lambda con: None)
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as con:
                    await con.execute(f"LISTEN {CHANNEL}")
                    if failures:
                        log.info("following the shared lists again")
                    failures = 0
                    while True:
                        cursor = await con.execute(f"SELECT name, version FROM {TABLE}")
                        await on_change({name: int(version) for name, version in await cursor.fetchall()})
                        async for _ in con.notifies(timeout=POLL_SECONDS, stop_after=1):
                            pass
            except (psycopg.Error, OSError) as exc:
                if not failures:
                    log.warning("lost the PostgreSQL connection that follows the shared lists (%s); reconnecting",
                                _reason(exc))
                await anyio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
                failures += 1
