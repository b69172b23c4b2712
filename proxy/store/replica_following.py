"""Following the other replicas of a shared store (PostgreSQL): their commits replayed from the
change log into this replica's rows, graph and indexes, in order; the lock every replica's merges
take. On a store of its own (the embedded one) there is nothing to follow."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, cast

import anyio
import anyio.to_thread

from proxy.store.change_log import decode

if TYPE_CHECKING:
    from proxy.store.backends import Backend
    from proxy.store.changes import Changeset, IndexDelta
    from proxy.store.protocols.tables import SharedTables, Tables

log = logging.getLogger("graphgate.store")


class FollowedStore(Protocol):
    """What following reads and does of its store (``store.py``)."""

    backend: Backend
    tables: Tables
    generation: int
    apply_lock: anyio.Lock

    def committed(self) -> None: ...

    def apply_memory_sync(self, changes: Changeset, deltas: dict[str, IndexDelta], generation: int) -> int: ...

    def reload_memory_sync(self) -> None: ...


class ReplicaFollowing:
    def __init__(self, store: FollowedStore) -> None:
        self._store = store

    @property
    def _shared(self) -> SharedTables:
        return cast("SharedTables", self._store.tables)

    async def follow(self) -> int:
        """Apply the commits other replicas made since this one's generation, in their order (the
        change log); how many. Nothing to do on a store no one else writes."""
        store = self._store
        if not store.backend.shared:
            return 0
        async with store.apply_lock:
            with anyio.CancelScope(shield=True):
                applied = await anyio.to_thread.run_sync(self.replay_sync, None)
        if applied:
            store.committed()
        return applied

    async def forever(self) -> None:
        """``follow`` whenever the tables say another replica committed; until cancelled."""
        if self._store.backend.shared:
            await self._shared.listen(self.follow)

    @contextlib.asynccontextmanager
    async def merge_turn(self) -> AsyncIterator[None]:
        """The graph to this replica for a merge or an edit: on a shared store, the lock every
        replica's merges and edits take, then this replica's rows and graph brought up to the others'
        commits, so what it prepares from is what it commits over. Nothing on a store of its own."""
        if not self._store.backend.shared:
            yield
            return
        async with self._shared.merge_turn():
            await self.follow()
            yield

    async def merge_turn_held(self) -> bool:
        """Whether a merge turn this replica holds is still its own (always, on a store of its own)."""
        return not self._store.backend.shared or await self._shared.merge_turn_held()

    def replay_sync(self, until: int | None) -> int:
        """The logged commits after this replica's generation (and before ``until``) into the rows,
        graph and indexes; a gap in the log (an entry trimmed away) reloads them from the tables."""
        store = self._store
        applied = 0
        while entries := self._shared.changes_since_sync(store.generation):   # a page at a time
            for generation, data in entries:
                if until is not None and generation >= until:
                    return applied
                if generation != store.generation + 1 or data.get("reload"):   # a gap, or a re-embedding
                    log.warning("this replica fell behind the change log: reloading the rows and graph from the "
                                "tables")
                    store.reload_memory_sync()
                    return applied + 1
                changes, deltas = decode(data)
                store.apply_memory_sync(changes, deltas, generation)
                applied += 1
        return applied
