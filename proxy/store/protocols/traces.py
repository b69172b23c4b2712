"""The chat traces' table: what each recent chat turn asked, in which mode, and what was injected."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.store.protocols.batches import GroupedWrites


@dataclass
class Trace:
    api: str
    model: str
    mode: str
    query: str
    augmented: bool
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class TraceTables(Protocol):
    def writer(self, max_delay: float) -> GroupedWrites[Trace]:
        """Traces kept (only the most recent few hundred stay), batched over ``max_delay`` seconds."""
        ...

    async def recent(self, limit: int, offset: int) -> list[dict[str, Any]]:
        """The newest traces first: id, created_at (ISO, UTC), api, model, mode, query, augmented,
        reason and detail (a dict)."""
        ...

    async def count(self) -> int: ...

    async def one(self, trace_id: int) -> dict[str, Any] | None:
        """One trace's columns, its detail as stored (JSON text)."""
        ...
