"""A USearch cosine index persisted beside the database, tagged with the store generation it matches.

The index is derived data. ``generation`` records which committed state of the tables the file
on disk reflects; a mismatch at start-up (a crash between a commit and a save) is healed by
``sync_keys``, which adds and removes exactly the keys that differ from the tables.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from usearch.index import Index


DTYPES = ("f32", "f16", "i8")


class VectorIndex:
    def __init__(self, path: Path, dtype: str = "f16") -> None:
        self.path = path
        self.dtype = dtype
        self.index: Index | None = None
        self.generation = -1

    @property
    def ndim(self) -> int | None:
        return None if self.index is None else int(self.index.ndim)

    def __len__(self) -> int:
        return 0 if self.index is None else len(self.index)

    def _new(self, ndim: int) -> Index:
        return Index(ndim=ndim, metric="cos", dtype=self.dtype, connectivity=16, expansion_add=40,
                     expansion_search=64)

    def load(self, ndim: int | None) -> bool:
        """Load the saved index; False when it is missing, unreadable or of another dimension."""
        self.index, self.generation = (self._new(ndim) if ndim else None), -1
        gen_file = self.path.with_suffix(".gen")
        if not ndim or not self.path.exists() or not gen_file.exists():
            return False
        try:
            index = Index.restore(str(self.path))
            generation = int(gen_file.read_text().strip())
        except (OSError, ValueError, RuntimeError):
            return False
        if index is None or index.ndim != ndim or str(index.dtype).split(".")[-1].lower() != self.dtype:
            return False  # another dimension or element type: rebuilt from the tables
        self.index, self.generation = index, generation
        return True

    def ensure(self, ndim: int) -> None:
        if self.index is None:
            self.index = self._new(ndim)

    def keys(self) -> np.ndarray:
        if self.index is None or len(self.index) == 0:
            return np.empty(0, dtype=np.uint64)
        return np.asarray(self.index.keys, dtype=np.uint64)

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        if len(keys) == 0:
            return
        self.ensure(vectors.shape[1])
        assert self.index is not None
        self.index.add(np.asarray(keys, dtype=np.uint64), np.asarray(vectors, dtype=np.float32))

    def remove(self, keys: np.ndarray) -> None:
        if self.index is not None and len(keys):
            self.index.remove(np.asarray(keys, dtype=np.uint64))

    def search(self, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(key, cosine similarity) pairs, best first."""
        if self.index is None or len(self.index) == 0 or count <= 0:
            return []
        matches = self.index.search(np.asarray(vector, dtype=np.float32), min(count, len(self.index)))
        return [(int(k), 1.0 - float(d)) for k, d in zip(matches.keys, matches.distances, strict=True)]

    def save(self, generation: int) -> None:
        """Write the index, then its generation; both by rename, so a crash leaves the old pair."""
        if self.index is None:
            return
        tmp = self.path.with_suffix(".tmp")
        gen_tmp = self.path.with_suffix(".gen.tmp")
        try:
            self.index.save(str(tmp))
            os.replace(tmp, self.path)
            gen_tmp.write_text(str(generation))
            os.replace(gen_tmp, self.path.with_suffix(".gen"))
        except (OSError, RuntimeError) as exc:  # usearch reports a failed write as RuntimeError
            for leftover in (tmp, gen_tmp):  # a half-written copy would hold the space a full disk lacks
                leftover.unlink(missing_ok=True)
            raise OSError(f"could not save {self.path.name}: {exc}") from exc
        self.generation = generation

    def reset(self, ndim: int | None) -> None:
        self.index = self._new(ndim) if ndim else None
        self.generation = -1
