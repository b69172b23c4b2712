"""What the pipeline and its merge stage share: a document's work in progress, and how the merge
stage reports a document it is done with (so neither imports the other)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from proxy.core.errors import GraphGateError
from proxy.parsing.chunking import Chunk
from proxy.store.protocols.documents import Committed


def describe(error: BaseException) -> str:
    """A document's error as its row shows it."""
    if isinstance(error, GraphGateError):
        return error.message
    return f"internal error: {type(error).__name__}: {error}"


@dataclass
class Work:
    document_id: str
    name: str
    phase: str = "queued"
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.monotonic)
    chunks: list[Chunk] = field(default_factory=list)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    commits: list[Committed] = field(default_factory=list)  # extraction records not yet known committed
    alone: bool = False  # its batch failed to commit: merged again on its own
    resumed: bool = False  # begun in an earlier run (or retried): answered passes may be in the LLM cache


class MergeReports(Protocol):
    """Told by the merge stage about each document handed to it."""

    async def fail_with(self, document_id: str, exc: Exception) -> None:
        """The document failed (its row says why); never raises."""

    def merge_ended(self, document_id: str) -> None:
        """The document left the merge stage (merged, failed or dropped)."""
