"""The gateway's small lists (knowledge bases, API keys, knowledge models): each a named JSON
document with a version, kept where ``GRAPHGATE_STORE`` keeps the knowledge.

- Embedded store (``FileLists``): a file in the data directory each, as ever (``kbs/registry.json``,
  ``keys.json`` 0600, ``models.json``), written whole and durably (proxy/core/durable.py). One
  gateway owns a data directory, so nothing follows changes; the version is a digest of the file.
- PostgreSQL (``proxy/store/postgres/lists.py``): rows of ``public.graphgate_lists`` shared by every
  replica; a write is a compare-and-swap on the version in one transaction, followed by a NOTIFY,
  and each replica reloads a list whose version moved (``follow``).

A holder of a list (``KeyStore``, ``KnowledgeModels``, ``KnowledgeBases``) reads it once at start-up,
changes it only through ``update_sync`` (read, change, write, in one step: two replicas changing one
list at once both land) and, on PostgreSQL, is handed each newer version by ``follow``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread

from proxy.core.durable import write_json

log = logging.getLogger("graphgate")

KBS, KEYS, MODELS = "kbs", "keys", "models"
# the console sessions ended by a logout: a shared list on PostgreSQL only (the embedded store keeps its
# line-per-logout file, proxy/guards/auth.py's ``Revocations``)
SESSIONS = "sessions"
# each list's file in a data directory, and its mode (the keys' file holds hashes of secrets)
FILES: dict[str, tuple[str, int]] = {KBS: ("kbs/registry.json", 0o644), KEYS: ("keys.json", 0o600),
                                     MODELS: ("models.json", 0o644)}


class Unchanged(Exception):
    """Raised by an ``update_sync`` change to leave the list as it is (nothing is written)."""


class ListConflict(Exception):
    """A compare-and-swap found another version than the one expected."""


class ListUnavailable(OSError):
    """The lists' server cannot be reached (an OSError: its holders report it as they do a disk's)."""


@dataclass(frozen=True)
class StoredList:
    body: Any   # the JSON document; None when the list was never written
    version: int   # 0 when never written


class Lists(Protocol):
    shared: bool   # several gateways read and write the same lists (then ``follow`` keeps them in step)

    def where(self, name: str) -> str: ...   # the list's place, for messages

    def read_sync(self, name: str) -> StoredList: ...   # OSError, or ValueError for a file that is no JSON

    def write_sync(self, name: str, body: Any, expected: int) -> StoredList: ...   # ListConflict

    def update_sync(self, name: str, change: Callable[[Any], Any]) -> StoredList: ...

    def versions_sync(self) -> dict[str, int]: ...

    async def listen(self, on_change: Callable[[dict[str, int]], Awaitable[None]]) -> None: ...


def file_version(text: str) -> int:
    """A file's version: a digest of its text (changes whenever the list does)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big") + 1


def dumped(body: Any) -> str:
    """The text ``write_json`` writes for ``body``."""
    return json.dumps(body, indent=1)


class FileLists:
    """Each list a file of the data directory (see the module's docstring)."""

    shared = False

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock = threading.Lock()   # one read-change-write at a time in this process

    def path(self, name: str) -> Path:
        return self.data_dir / FILES[name][0]

    def where(self, name: str) -> str:
        return str(self.path(name))

    def read_sync(self, name: str) -> StoredList:
        try:
            text = self.path(name).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return StoredList(None, 0)
        return StoredList(json.loads(text), file_version(text))

    def _write_sync(self, name: str, body: Any) -> StoredList:
        write_json(self.path(name), body, mode=FILES[name][1])
        return StoredList(body, file_version(dumped(body)))

    def write_sync(self, name: str, body: Any, expected: int) -> StoredList:
        with self._lock:
            if self.read_sync(name).version != expected:
                raise ListConflict(f"{self.where(name)} changed since version {expected}")
            return self._write_sync(name, body)

    def update_sync(self, name: str, change: Callable[[Any], Any]) -> StoredList:
        with self._lock:
            current = self.read_sync(name)
            try:
                body = change(current.body)
            except Unchanged:
                return current
            return self._write_sync(name, body)

    def versions_sync(self) -> dict[str, int]:
        """The versions of the lists written so far (those that can be read)."""
        versions = {}
        for name in FILES:
            try:
                version = self.read_sync(name).version
            except (OSError, ValueError):
                continue
            if version:
                versions[name] = version
        return versions

    async def listen(self, on_change: Callable[[dict[str, int]], Awaitable[None]]) -> None:
        """One gateway per data directory: no other writer to follow."""
        await anyio.sleep_forever()


class Holder(Protocol):
    """What ``following`` keeps in step: the version it holds (-1 when its last read failed) and how
    it takes a newer one (it ignores a version not newer than its own)."""

    @property
    def version(self) -> int: ...

    async def refresh(self, stored: StoredList) -> None: ...


@asynccontextmanager
async def following(lists: Lists, holders: Mapping[str, Holder]) -> AsyncIterator[None]:
    """While the block runs: each holder is handed its list whenever its version moves (another
    replica's write, announced by a notification or found by the poll)."""
    failures: dict[str, str] = {}

    async def on_change(versions: dict[str, int]) -> None:
        for name, holder in holders.items():
            if versions.get(name, 0) == holder.version:
                continue
            try:
                document = await anyio.to_thread.run_sync(lists.read_sync, name)
                await holder.refresh(document)
                failures.pop(name, None)
            except Exception as exc:  # noqa: BLE001 - the next change or poll tries again; said once
                if failures.get(name) != str(exc):
                    log.warning("the list %r could not be reloaded: %s", name, exc)
                failures[name] = str(exc)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(lists.listen, on_change)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as errors:
        # the task group wraps whatever ends the block (a store that cannot open, say): let it out as
        # it was raised (the listener raises nothing)
        if len(errors.exceptions) == 1:
            raise errors.exceptions[0] from None
        raise
