"""A priority limiter for GraphGate's own upstream calls.

At most ``capacity`` calls run at once; when a slot frees, the waiter with the best (lowest)
priority gets it, first come first served within a priority. A chat-time call therefore waits
for at most one running call to finish, never behind a queue of extraction calls.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum

import anyio


class Priority(IntEnum):
    CHAT = 0        # keywords and query embeddings for a user's chat turn
    SUMMARY = 1     # description summaries while merging
    INGEST = 2      # extraction and ingestion embeddings


class PriorityLimiter:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.running = 0
        self._waiters: list[tuple[int, int, anyio.Event]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, priority: Priority) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: Priority) -> None:
        if self.running < self.capacity and not self._waiters:
            self.running += 1
            return
        entry = (int(priority), next(self._order), anyio.Event())
        heapq.heappush(self._waiters, entry)
        try:
            await entry[2].wait()
        except BaseException:
            if entry in self._waiters:  # cancelled while waiting: leave the queue
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            else:  # cancelled just after being handed the slot: pass it on
                self._release()
            raise

    def _release(self) -> None:
        if self._waiters:
            _, _, event = heapq.heappop(self._waiters)
            event.set()  # the slot passes straight to the waiter; running stays the same
        else:
            self.running -= 1
