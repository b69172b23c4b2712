"""Group small writes into shared transactions, and point reads that arrive together into one query.

Each DuckDB commit costs milliseconds; chunk extractions finish many times a second. Callers
``await write(item)`` and return once their item is committed (so durability is unchanged for
them); items that arrive together share one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel


class BatchedDatabase(Protocol):
    """What batching needs of a backend's connection (``duckdb/connection.py``, ``postgres/connection.py``):
    ``fn(connection, *args)`` in a worker thread, a write in one transaction."""

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def write(self, fn: Callable[..., Any], *args: Any) -> Any: ...


Con = Any   # the backend's connection

T = TypeVar("T")


class BatchWait:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.errors: list[BaseException] = []

    async def wait(self) -> None:
        await self.done.wait()
        if self.errors:
            raise self.errors[0]

    def outcome(self) -> bool | None:
        return not self.errors if self.done.is_set() else None


class BatchWriter(Generic[T]):
    def __init__(self, db: BatchedDatabase, apply: Callable[[Con, list[T]], None], *, max_items: int = 64,
                 max_delay: float = 0.02, group: CommitGroup | None = None) -> None:
        self.db = db
        self.apply = apply
        self.max_items = max_items
        self.max_delay = max_delay
        self.group = group  # when set, the group commits this writer's items (``run`` is not used)
        self._pending: list[tuple[T, anyio.Event, list[BaseException]]] = []
        self._wake = anyio.Event()

    async def write(self, item: T) -> None:
        await self.submit(item).wait()

    def submit(self, item: T) -> BatchWait:
        """Queue ``item``; the returned handle's ``wait()`` returns once it is committed."""
        pending = BatchWait()
        self._pending.append((item, pending.done, pending.errors))
        (self.group.wake if self.group is not None else self._wake).set()
        return pending

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if len(self._pending) < self.max_items:
                    await anyio.sleep(self.max_delay)  # let concurrent writers join this transaction
                batch = self._take()
                if self._pending:
                    self._wake.set()
                with anyio.CancelScope(shield=True):  # a batch taken out of the queue is committed whole
                    await self._commit(batch)
        finally:
            # shutdown cancels us: what callers already handed over is committed, not dropped
            # (an answered extraction lost here would be paid for again after the restart)
            with anyio.CancelScope(shield=True):
                while self._pending:
                    await self._commit(self._take())

    def _take(self) -> list[tuple[T, anyio.Event, list[BaseException]]]:
        batch, self._pending = self._pending[:self.max_items], self._pending[self.max_items:]
        return batch

    async def _commit(self, batch: list[tuple[T, anyio.Event, list[BaseException]]]) -> None:
        try:
            await self.db.write(self.apply, [item for item, _, _ in batch])
        except Exception as exc:  # noqa: BLE001 - every waiter gets the error
            for _, _, errors in batch:
                errors.append(exc)
        for _, done, _ in batch:
            done.set()



class CommitGroup:
    """Writers whose waiting items share one transaction: every small write the pipeline makes
    (uploads, "processing" statuses, finished extractions) goes in the next commit together, in the
    order the writers were made. Each DuckDB statement costs milliseconds whatever its size, and
    the store has one writer: separate small transactions kept it busy most of the time.
    A shared transaction that fails is retried writer by writer, so only the failing writer's
    callers see the error."""

    def __init__(self, db: BatchedDatabase) -> None:
        self.db = db
        self.writers: list[BatchWriter[Any]] = []
        self.wake = anyio.Event()

    def writer(self, apply: Callable[[Con, list[T]], None], *, max_items: int = 64) -> BatchWriter[T]:
        writer: BatchWriter[T] = BatchWriter(self.db, apply, max_items=max_items, max_delay=0, group=self)
        self.writers.append(writer)
        return writer

    def _take(self) -> list[tuple[BatchWriter[Any], list[Any]]]:
        return [(writer, writer._take()) for writer in self.writers if writer._pending]

    async def run(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake = anyio.Event()
                batches = self._take()
                if any(writer._pending for writer in self.writers):
                    self.wake.set()
                with anyio.CancelScope(shield=True):  # batches taken out of the queues are committed whole
                    await self._commit(batches)
        finally:
            with anyio.CancelScope(shield=True):  # shutdown: what callers handed over is committed
                while batches := self._take():
                    await self._commit(batches)

    async def _commit(self, batches: list[tuple[BatchWriter[Any], list[Any]]]) -> None:
        if len(batches) == 1:
            await batches[0][0]._commit(batches[0][1])
            return
        work = [(writer.apply, [item for item, _, _ in batch]) for writer, batch in batches]
        try:
            await self.db.write(_apply_all, work)
        except Exception:  # noqa: BLE001 - each writer alone, so that only the failing one fails
            for writer, batch in batches:
                await writer._commit(batch)
            return
        for _, batch in batches:
            for _, done, _ in batch:
                done.set()


def _apply_all(con: Con, work: list[tuple[Callable[[Con, list[Any]], None], list[Any]]]) -> None:
    for apply, items in work:
        apply(con, items)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Lookup(Generic[V]):
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: V | None = None
        self.error: BaseException | None = None


class BatchedReader(Generic[K, V]):
    """``get(key)`` calls made in the same moment share one ``read(con, keys) -> {key: value}``:
    a merge asks the LLM cache for hundreds of summaries at once, and each query costs about a
    millisecond of DuckDB whatever it fetches. The first caller of a round reads for everyone."""

    def __init__(self, db: BatchedDatabase, read: Callable[[Con, list[K]], dict[K, V]]) -> None:
        self.db = db
        self.read = read
        self._round: dict[K, _Lookup[V]] = {}

    async def get(self, key: K) -> V | None:
        lookup = self._round.get(key)
        if lookup is None:
            lookup = self._round[key] = _Lookup()
            if len(self._round) == 1:
                await self._lead()
        await lookup.done.wait()
        if lookup.error is not None:
            raise lookup.error
        return lookup.value

    async def _lead(self) -> None:
        # shielded: the others of the round wait on this read even if its own caller is cancelled
        with anyio.CancelScope(shield=True):
            await anyio.lowlevel.checkpoint()  # callers started in the same moment join the round
            batch, self._round = self._round, {}
            try:
                found = await self.db.read(self.read, list(batch))
                for key, lookup in batch.items():
                    lookup.value = found.get(key)
            except Exception as exc:  # noqa: BLE001 - every caller of the round gets the error
                for lookup in batch.values():
                    lookup.error = exc
            finally:
                for lookup in batch.values():
                    lookup.done.set()
