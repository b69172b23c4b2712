"""Writes that ride beside a chat (its trace, new cache entries): made in the background, and
never allowed to fail the chat."""

from __future__ import annotations

import logging
from typing import TypeVar

from anyio.abc import TaskGroup

from proxy.store.protocols.batches import GroupedWrites

log = logging.getLogger("graphgate")
T = TypeVar("T")


def write_in_background(group: TaskGroup, writes: GroupedWrites[T], item: T) -> None:
    group.start_soon(_quietly, writes, item)


async def _quietly(writes: GroupedWrites[T], item: T) -> None:
    try:
        await writes.write(item)
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never break a chat
        log.warning("could not record %s: %s", type(item).__name__, exc)
