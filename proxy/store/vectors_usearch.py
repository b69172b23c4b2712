"""A USearch cosine index persisted beside the database, tagged with the store generation it matches.

The index is derived data. ``generation`` records which committed state of the tables the file
on disk reflects; a mismatch at start-up (a crash between a commit and a save) is healed by
``sync_keys``, which adds and removes exactly the keys that differ from the tables.

i8 indexes are quantised here, not by USearch: USearch scales a unit vector by 127, which leaves a
768-d embedding's components (about +-0.04) a handful of levels each and costs a tenth of top-10
recall. Each vector is scaled so that its largest component is +-127 instead; the cosine metric is
blind to a vector's scale, so distances stay true cosines and recall comes within about 1 % of f16
at half its memory (``bench/index_recall.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

import numpy as np
from usearch.index import Index

DTYPES = ("f32", "f16", "i8")
I8_MAX = 127
# how the saved vectors were made, written beside the generation: an i8 index cast by USearch
# itself (an earlier release) is rebuilt, not trusted
FORMATS = {"i8": "i8-scaled"}
# HNSW settings; USearch does not save the search ones with an index, so a restore passes them too.
# expansion_search 128: recall@10 0.98-0.99 for i8 and 0.998+ for f16, at ~0.1 ms more a search
class HnswSettings(TypedDict):
    connectivity: int
    expansion_add: int
    expansion_search: int


HNSW: HnswSettings = {"connectivity": 16, "expansion_add": 40, "expansion_search": 128}


def quantise_i8(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled so that its largest component is +-127, then rounded (zero rows, and rows
    that are not finite, which the embedding boundary refuses anyway, become zero)."""
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    peak = np.abs(vectors).max(axis=1, keepdims=True)
    usable = np.isfinite(peak) & (peak > 0)
    scale = np.divide(I8_MAX, peak, out=np.zeros_like(peak), where=usable)
    return np.rint(np.where(usable, vectors, 0.0) * scale).astype(np.int8)


class VectorIndex:
    def __init__(self, path: Path, dtype: str = "i8") -> None:
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
        return Index(ndim=ndim, metric="cos", dtype=self.dtype, **HNSW)

    def _prepare(self, vectors: np.ndarray) -> np.ndarray:
        return quantise_i8(vectors) if self.dtype == "i8" else np.asarray(vectors, dtype=np.float32)

    def load(self, ndim: int | None) -> bool:
        """Load the saved index; False when it is missing, unreadable or of another dimension."""
        self.index, self.generation = (self._new(ndim) if ndim else None), -1
        gen_file = self.path.with_suffix(".gen")
        if not ndim or not self.path.exists() or not gen_file.exists():
            return False
        try:
            generation_line, _, fmt = gen_file.read_text().partition("\n")
            generation = int(generation_line.strip())
            if fmt.strip() != FORMATS.get(self.dtype, ""):
                return False  # e.g. i8 quantised by USearch itself: rebuilt at full resolution
            index = Index.restore(str(self.path), **HNSW)
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
        self.index.add(np.asarray(keys, dtype=np.uint64), self._prepare(vectors))

    def remove(self, keys: np.ndarray) -> None:
        if self.index is not None and len(keys):
            self.index.remove(np.asarray(keys, dtype=np.uint64))

    def search(self, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(key, cosine similarity) pairs, best first."""
        if self.index is None or len(self.index) == 0 or count <= 0:
            return []
        matches = self.index.search(self._prepare(vector).reshape(-1), min(count, len(self.index)))
        return [(int(k), 1.0 - float(d)) for k, d in zip(matches.keys, matches.distances, strict=True)]

    def search_many(self, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and cosine similarities, one row per vector, best first (``count`` capped at the size)."""
        assert self.index is not None
        matches = self.index.search(self._prepare(vectors), min(count, len(self.index)))
        return np.atleast_2d(matches.keys), 1.0 - np.atleast_2d(matches.distances)

    def vectors(self, keys: np.ndarray) -> np.ndarray:
        """Stored vectors of ``keys`` as float32 unit rows (i8 ones de-quantised); no rows at all
        when any key is missing (the caller's tables and the index are out of step)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if self.index is None or len(keys) == 0 or not np.all(self.index.contains(keys)):
            return np.empty((0, self.ndim or 0), dtype=np.float32)
        found = np.atleast_2d(np.asarray(self.index.get(np.asarray(keys, dtype=np.uint64)), dtype=np.float32))
        norms = np.linalg.norm(found, axis=1, keepdims=True)
        return found / np.where(norms == 0, 1.0, norms)

    def similarities(self, keys: np.ndarray, vector: np.ndarray) -> np.ndarray:
        found = self.vectors(keys)
        if len(found) != len(keys) or len(found) == 0:
            return np.empty(0, dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        return np.asarray(found @ (query / (np.linalg.norm(query) or 1.0)), dtype=np.float32)

    def save(self, generation: int) -> None:
        """Write the index, then its generation; both by rename, so a crash leaves the old pair."""
        if self.index is None:
            return
        tmp = self.path.with_suffix(".tmp")
        gen_tmp = self.path.with_suffix(".gen.tmp")
        try:
            self.index.save(str(tmp))
            os.replace(tmp, self.path)
            fmt = FORMATS.get(self.dtype)
            gen_tmp.write_text(f"{generation}\n{fmt}\n" if fmt else str(generation))
            os.replace(gen_tmp, self.path.with_suffix(".gen"))
        except (OSError, RuntimeError) as exc:  # usearch reports a failed write as RuntimeError
            for leftover in (tmp, gen_tmp):  # a half-written copy would hold the space a full disk lacks
                leftover.unlink(missing_ok=True)
            raise OSError(f"could not save {self.path.name}: {exc}") from exc
        self.generation = generation

    def reset(self, ndim: int | None) -> None:
        self.index = self._new(ndim) if ndim else None
        self.generation = -1
