"""The console playground's pending answers: what a question's answer is to be generated from (the
model and the messages, context injected), kept between the request that retrieves and the one
that streams the answer. Short-lived, single use, bound to the console session that asked.

On one machine they are kept in memory. On a store several replicas share (PostgreSQL) they are a
table of the server (``proxy/store/postgres/pending.py``), so the stream may be asked of any
replica behind a load balancer. ``proxy/store/lists_open.py`` picks one."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

TTL_SECONDS = 300.0   # a pending answer waits this long for its stream
SLOTS = 64            # kept at most in memory (the oldest go first)


@dataclass
class PendingAnswer:
    session: str | None
    model: str
    messages: list[dict[str, Any]]


class PendingAnswers(Protocol):
    async def put(self, token: str, pending: PendingAnswer) -> None: ...

    async def take(self, token: str) -> PendingAnswer | None:
        """The pending answer, once (None when unknown, taken or expired)."""


class MemoryPendingAnswers:
    def __init__(self) -> None:
        self._answers: OrderedDict[str, tuple[float, PendingAnswer]] = OrderedDict()

    async def put(self, token: str, pending: PendingAnswer) -> None:
        now = time.monotonic()
        for stale in [t for t, (expires, _) in self._answers.items() if expires <= now]:
            del self._answers[stale]
        while len(self._answers) >= SLOTS:
            self._answers.popitem(last=False)
        self._answers[token] = (now + TTL_SECONDS, pending)

    async def take(self, token: str) -> PendingAnswer | None:
        found = self._answers.pop(token, None)
        return found[1] if found is not None and found[0] > time.monotonic() else None

