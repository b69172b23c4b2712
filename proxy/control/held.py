"""One list of the control plane as a gateway holds it (``HeldList``): the knowledge bases, the API
keys and the knowledge models are each one of these, with their own parsing and their own rules on
top.

A held list is read once at start-up (``load``), changed only through ``change`` (read, change,
write in one step of ``Lists.update_sync``: two replicas changing one list at once both land) and,
on a shared store, handed every newer version by ``following`` (``refresh``). A list that cannot be
read or is not of its shape is held as empty, with its ``failure``, and its holder refuses to write
over it: the operator repairs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

from proxy.control.lists import Lists, StoredList

T = TypeVar("T")
# what ``parse`` raises for a body that is not of the list's shape
NOT_OF_ITS_SHAPE = (ValueError, TypeError, AttributeError)


class HeldList(Generic[T]):
    def __init__(self, lists: Lists, name: str, parse: Callable[[Any], T], empty: T, *,
                 taken: Callable[[T], Awaitable[None]] | None = None) -> None:
        self.lists = lists
        self.name = name
        self.where = lists.where(name)   # the file, or the shared list: for messages
        self.parse = parse   # a stored body into the value
        self.empty = empty   # the value of a list never written, or that cannot be read
        self.taken = taken   # told each value taken after the first load (a change, a refresh)
        self.value: T = empty
        self.version = 0   # of the list the value is (-1: the last read failed)
        self.failure: Exception | None = None   # why the list in hand could not be read
        self.lock = anyio.Lock()   # one change or refresh at a time

    def load_sync(self) -> Exception | None:
        """Read the list (in a worker thread); its failure, if any, is returned and kept."""
        try:
            self._hold(self.lists.read_sync(self.name))
        except (OSError, *NOT_OF_ITS_SHAPE) as exc:
            self.value, self.version, self.failure = self.empty, -1, exc
        return self.failure

    async def load(self) -> Exception | None:
        return await anyio.to_thread.run_sync(self.load_sync)

    async def refresh(self, stored: StoredList) -> None:
        """A newer version of the shared list (another replica's change): held from now on."""
        async with self.lock:
            if stored.version > self.version:
                with anyio.CancelScope(shield=True):
                    await self._take(stored)

    async def change(self, change: Callable[[T], Any]) -> T:
        """Write ``change(value)`` (it returns the body to store, raises ``Unchanged`` to leave the
        list as it is, or raises to refuse) over the list's newest version, then hold what was
        written. OSError when it cannot be written: nothing changed."""
        async with self.lock:
            with anyio.CancelScope(shield=True):   # a caller that goes away does not leave it mid-write
                stored = await anyio.to_thread.run_sync(self.lists.update_sync, self.name, lambda body: change(
                    self.empty if body is None else self.parse(body)))
                await self._take(stored)   # even at the same version: what memory held may differ
        return self.value

    def _hold(self, stored: StoredList) -> None:
        self.value = self.parse(stored.body) if stored.version else self.empty
        self.version, self.failure = stored.version, None

    async def _take(self, stored: StoredList) -> None:
        try:
            self._hold(stored)
        except NOT_OF_ITS_SHAPE as exc:
            self.value, self.version, self.failure = self.empty, stored.version, exc
            return
        if self.taken is not None:
            await self.taken(self.value)
