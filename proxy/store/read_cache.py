"""A bounded cache of texts the retrieval reads per turn (descriptions, chunk texts), by vector
key. Under a burst of chats every turn reads the same hubs' descriptions and the same chunks from
DuckDB, beside the ingestion's writes; a key's text changes only with a new key (a changed text is
re-embedded), and the store evicts the keys a commit touches or removes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


class TextCache(Generic[V]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[int, V] = OrderedDict()
        self._lock = threading.Lock()   # worker threads only; held for dictionary work, never for I/O

    def get_many(self, keys: Iterable[int]) -> tuple[dict[int, V], list[int]]:
        """The cached values of ``keys`` and the keys that are not cached."""
        hits: dict[int, V] = {}
        missing: list[int] = []
        with self._lock:
            for key in keys:
                if key in self._items:
                    self._items.move_to_end(key)
                    hits[key] = self._items[key]
                else:
                    missing.append(key)
        return hits, missing

    def put_many(self, values: dict[int, V]) -> None:
        with self._lock:
            self._items.update(values)
            for key in values:
                self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def evict(self, keys: Iterable[int]) -> None:
        with self._lock:
            for key in keys:
                self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
