"""A vector index over one indexed table (chunks, entities or relations): keys are the rows'
vector keys, similarity is cosine. Derived data: the store heals it from the tables at start-up,
tagged with the tables' generation it matches. USearch today (``proxy/store/vectors_usearch.py``)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Vectors(Protocol):
    generation: int

    @property
    def ndim(self) -> int | None: ...

    def __len__(self) -> int: ...

    def load(self, ndim: int | None) -> bool:
        """Load the saved index; False when it is missing, unreadable or of another dimension."""

    def reset(self, ndim: int | None) -> None: ...

    def save(self, generation: int) -> None:
        """Persist atomically (a crash leaves the previous pair of index and generation)."""

    def keys(self) -> np.ndarray: ...

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None: ...

    def remove(self, keys: np.ndarray) -> None: ...

    def search(self, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(key, cosine similarity) pairs, best first."""

    def search_many(self, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]: ...

    def vectors(self, keys: np.ndarray) -> np.ndarray:
        """Stored vectors of ``keys`` as float32 unit rows; no rows when any key is missing."""

    def similarities(self, keys: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosine of each stored vector of ``keys`` to ``vector``; empty when any key is missing
        (where the vectors live elsewhere, only the numbers travel)."""
