"""A priority limiter for GraphGate's own upstream calls.

At most ``capacity`` calls run at once. When a slot frees, the waiter with the best (lowest)
priority gets it, first come first served within a priority, with one exception that keeps
ingestion alive under a steady stream of chats: while chat-time calls and background calls
(summaries, extraction) both wait and no background call is running, a slot freed by a chat-time
call goes to the background. So a chat-time call waits for at most one background call to
finish, never behind a queue of them, and a busy chat load cannot starve ingestion: background
work always gets about one slot in two turns.

A chat-time caller may also bound its wait (``slot(..., wait=s)``): past it, ``Busy`` is raised
and the caller does without (retrieval then skips the keyword call rather than delay the chat).
Such a caller gets ``Busy`` at once when as many calls of its priority already queue as there
are slots: under a sustained overload it would only wait out its whole budget to give up.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum

import anyio

from proxy.core.errors import ServiceUnavailable


class Priority(IntEnum):
    CHAT = 0        # keywords and query embeddings for a user's chat turn
    SUMMARY = 1     # description summaries while merging
    INGEST = 2      # extraction and ingestion embeddings
    BACKGROUND = 3  # community summaries, written when the pipeline is idle: after everything else


class Busy(ServiceUnavailable):
    """No upstream slot came free within the wait the caller allowed."""


class PriorityLimiter:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.running = 0
        self.background_running = 0
        self._waiters: list[tuple[int, int, anyio.Event]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, priority: Priority, *, wait: float | None = None) -> AsyncIterator[None]:
        await self._acquire(priority, wait)
        try:
            yield
        finally:
            self._release(priority != Priority.CHAT)

    async def _acquire(self, priority: Priority, wait: float | None) -> None:
        background = priority != Priority.CHAT
        if self.running < self.capacity and not self._waiters:
            self.running += 1
            self.background_running += background
            return
        if wait is not None and sum(e[0] <= priority for e in self._waiters) >= self.capacity:
            raise Busy(f"{self.capacity} upstream calls already wait for a slot")
        entry = (int(priority), next(self._order), anyio.Event())
        heapq.heappush(self._waiters, entry)
        try:
            with anyio.fail_after(wait):
                await entry[2].wait()
        except BaseException as exc:
            if entry in self._waiters:  # gave up or cancelled while waiting: leave the queue
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            else:  # handed the slot just as we left: pass it on
                self._release(background)
            if isinstance(exc, TimeoutError):
                raise Busy(f"no upstream slot free within {wait:g} s") from None
            raise

    def _release(self, was_background: bool) -> None:
        self.background_running -= was_background
        if not self._waiters:
            self.running -= 1
            return
        entry = self._waiters[0]
        if entry[0] == Priority.CHAT and not was_background and self.background_running == 0:
            background = [e for e in self._waiters if e[0] != Priority.CHAT]
            if background:  # chats and background both wait: the background's turn
                entry = min(background)
        if entry is self._waiters[0]:
            heapq.heappop(self._waiters)
        else:
            self._waiters.remove(entry)
            heapq.heapify(self._waiters)
        self.background_running += entry[0] != Priority.CHAT
        entry[2].set()  # the slot passes straight to the waiter; running stays the same
