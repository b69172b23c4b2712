"""Writes and reads a backend groups: many small ones that arrive together share one transaction
or one query (each statement costs milliseconds whatever its size)."""

from __future__ import annotations

from typing import Protocol, TypeVar

Item_contra = TypeVar("Item_contra", contravariant=True)
Key_contra = TypeVar("Key_contra", contravariant=True)
Value_co = TypeVar("Value_co", covariant=True)


class GroupedWrites(Protocol[Item_contra]):
    """``write`` returns once its item is committed; items written in the same moment share a
    transaction. ``run`` does the committing: start it in a task group and cancel it at shutdown
    (what was handed over by then is still committed)."""

    async def write(self, item: Item_contra) -> None: ...

    async def run(self) -> None: ...


class GroupedReads(Protocol[Key_contra, Value_co]):
    """``get`` calls made in the same moment share one query; None when nothing is stored."""

    async def get(self, key: Key_contra) -> Value_co | None: ...
