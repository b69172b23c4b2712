"""A keyword (full-text) index over one indexed table's texts (chunk contents; entity and relation
names and descriptions): keys are the rows' vector keys, a row's text never changes under its key
(a changed text is re-embedded under a new key), so "in step with the tables" is a comparison of
key sets, as for the vector indexes. Derived data, tagged with the generation it was built at.
BM25 through bm25s today (``proxy/store/keywords_bm25.py``)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class KeywordIndex(Protocol):
    generation: int   # the store generation the saved files were built at; -1 when not saved

    def __len__(self) -> int: ...

    def load(self) -> bool:
        """Load the saved index; False when it is missing or unreadable."""

    def save(self, generation: int) -> None:
        """Persist atomically what changed since the last save (a crash leaves the previous copy)."""

    def keys(self) -> np.ndarray:
        """Every key the index holds."""

    def add(self, keys: list[int], texts: list[str]) -> None:
        """Index ``texts`` under ``keys``; a key already held is left as it is."""

    def remove(self, keys: list[int]) -> None: ...

    def needs_rebuild(self) -> bool:
        """True when the additions since the last build are worth a rebuild (``rebuild``)."""

    def rebuild(self, keys: list[int], texts: list[str]) -> None:
        """Replace everything with ``texts`` under ``keys``."""

    def search(self, query: str, count: int) -> list[tuple[int, float]]:
        """(key, score) of the ``count`` best matches of ``query``'s words, best first; only rows
        sharing a word with it."""
