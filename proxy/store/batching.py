"""Group small writes into shared transactions.

Each DuckDB commit costs milliseconds; chunk extractions finish many times a second. Callers
``await write(item)`` and return once their item is committed (so durability is unchanged for
them); items that arrive together share one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

from .tables_duckdb import Con, Database

T = TypeVar("T")


class Pending:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.errors: list[BaseException] = []

    async def wait(self) -> None:
        await self.done.wait()
        if self.errors:
            raise self.errors[0]


class BatchWriter(Generic[T]):
    def __init__(self, db: Database, apply: Callable[[Con, list[T]], None], *, max_items: int = 64,
                 max_delay: float = 0.02) -> None:
        self.db = db
        self.apply = apply
        self.max_items = max_items
        self.max_delay = max_delay
        self._pending: list[tuple[T, anyio.Event, list[BaseException]]] = []
        self._wake = anyio.Event()

    async def write(self, item: T) -> None:
        await self.submit(item).wait()

    def submit(self, item: T) -> Pending:
        """Queue ``item``; the returned handle's ``wait()`` returns once it is committed."""
        pending = Pending()
        self._pending.append((item, pending.done, pending.errors))
        self._wake.set()
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

