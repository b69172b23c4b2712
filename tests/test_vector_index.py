"""The vector index's element types on their real engine (USearch): what i8 keeps of the cosine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from usearch.index import Index

from proxy.store.vectors_usearch import VectorIndex, quantise_i8

DIM = 256


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit vectors around a shared direction, as embedding models' are."""
    topics = rng.standard_normal((40, DIM)).astype(np.float32)
    v = topics[rng.integers(0, 40, n)] * 0.6 + rng.standard_normal((n, DIM)).astype(np.float32) * 0.5
    v = v + rng.standard_normal(DIM).astype(np.float32) * 0.8
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_quantise_uses_the_whole_int8_range() -> None:
    rng = np.random.default_rng(1)
    v = clustered(rng, 50)
    q = quantise_i8(v)
    assert q.dtype == np.int8
    assert (np.abs(q.astype(np.int16)).max(axis=1) == 127).all()  # every row keeps full resolution
    assert quantise_i8(np.zeros((2, DIM))).tolist() == np.zeros((2, DIM), dtype=np.int8).tolist()
    # the quantised rows point where the originals do
    restored = q.astype(np.float32) / np.linalg.norm(q.astype(np.float32), axis=1, keepdims=True)
    assert np.min(np.sum(restored * v, axis=1)) > 0.9995


def test_i8_search_returns_true_cosines_and_recall(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    v = clustered(rng, 3000)
    index = VectorIndex(tmp_path / "x.usearch", "i8")
    index.add(np.arange(1, 3001, dtype=np.uint64), v)
    queries = v[rng.integers(0, 3000, 100)] + 0.05 * rng.standard_normal((100, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    hits = 0
    for q in queries:
        exact = v @ q
        truth = set((np.argsort(-exact)[:10] + 1).tolist())
        found = index.search(q, 10)
        hits += len(truth & {k for k, _ in found})
        for key, similarity in found:  # reported similarities are the real cosines, not i8-scaled ones
            assert abs(similarity - float(exact[key - 1])) < 0.01
    assert hits / 1000 >= 0.95


def test_usearch_own_i8_would_lose_recall() -> None:
    """Why we quantise ourselves: the same corpus through USearch's own f32 -> i8 cast."""
    rng = np.random.default_rng(2)
    v = clustered(rng, 3000)
    own = Index(ndim=DIM, metric="cos", dtype="i8")
    own.add(np.arange(3000, dtype=np.uint64), v)
    assert int(np.abs(np.asarray(own.get(np.uint64(0)))).max()) < 60  # a handful of levels per component
    ours = Index(ndim=DIM, metric="cos", dtype="i8")
    ours.add(np.arange(3000, dtype=np.uint64), quantise_i8(v))
    q = v[:50]

    def recall(index: Index, prepare) -> float:
        found = [set(index.search(prepare(x).reshape(-1), 10, exact=True).keys.tolist()) for x in q]
        truth = [set(np.argsort(-(v @ x))[:10].tolist()) for x in q]
        return float(np.mean([len(f & t) / 10 for f, t in zip(found, truth, strict=True)]))

    assert recall(ours, quantise_i8) > recall(own, lambda x: x) + 0.03


def test_vectors_come_back_as_unit_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    v = clustered(rng, 20)
    for dtype in ("f32", "f16", "i8"):
        index = VectorIndex(tmp_path / f"{dtype}.usearch", dtype)
        index.add(np.arange(1, 21, dtype=np.uint64), v)
        back = index.vectors(np.array([3, 7], dtype=np.uint64))
        assert back.dtype == np.float32 and back.shape == (2, DIM)
        assert np.allclose(np.linalg.norm(back, axis=1), 1.0, atol=1e-5)
        assert np.min(np.sum(back * v[[2, 6]], axis=1)) > 0.999
        keys, sims = index.search_many(back, 1)
        assert keys[:, 0].tolist() == [3, 7] and np.allclose(sims[:, 0], 1.0, atol=0.01)


@pytest.mark.parametrize("writer", ["usearch-cast", "ours"])
def test_an_i8_index_quantised_by_usearch_is_not_loaded(tmp_path: Path, writer: str) -> None:
    """An i8 index saved by an earlier release (USearch's own cast, a bare generation beside it)
    is rebuilt, not trusted; one saved by VectorIndex says how it was made and loads."""
    v = clustered(np.random.default_rng(4), 30)
    path = tmp_path / "chunks.usearch"
    if writer == "usearch-cast":
        index = Index(ndim=DIM, metric="cos", dtype="i8")
        index.add(np.arange(1, 31, dtype=np.uint64), v)
        index.save(str(path))
        path.with_suffix(".gen").write_text("5")
    else:
        ours = VectorIndex(path, "i8")
        ours.add(np.arange(1, 31, dtype=np.uint64), v)
        ours.save(5)
    loaded = VectorIndex(path, "i8")
    assert loaded.load(DIM) is (writer == "ours")
    assert len(loaded) == (30 if writer == "ours" else 0)
    assert loaded.generation == (5 if writer == "ours" else -1)


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
def test_a_restored_index_searches_as_a_new_one(tmp_path: Path, dtype: str) -> None:
    """USearch does not save the search settings with an index: a restore must set them again."""
    v = clustered(np.random.default_rng(5), 50)
    index = VectorIndex(tmp_path / "x.usearch", dtype)
    index.add(np.arange(1, 51, dtype=np.uint64), v)
    index.save(3)
    restored = VectorIndex(tmp_path / "x.usearch", dtype)
    assert restored.load(DIM)
    assert restored.index is not None and index.index is not None
    for setting in ("expansion_search", "expansion_add", "connectivity"):
        assert getattr(restored.index, setting) == getattr(index.index, setting)
    assert restored.index.expansion_search == 128
    assert restored.search(v[9], 1)[0][0] == 10


def test_non_finite_and_missing_vectors(tmp_path: Path) -> None:
    # a row that is not finite cannot be scaled: it becomes zero instead of garbage
    bad = np.full((1, DIM), np.nan)
    assert not quantise_i8(bad).any()
    # tiny but finite rows keep their direction (the scale is computed in float64)
    assert np.abs(quantise_i8(np.full((1, DIM), 1e-40)).astype(np.int16)).max() == 127
    v = clustered(np.random.default_rng(6), 5)
    index = VectorIndex(tmp_path / "x.usearch", "i8")
    index.add(np.arange(1, 6, dtype=np.uint64), v)
    # a key the index lacks: no rows at all, so callers see the index is out of step
    assert index.vectors(np.array([1, 99], dtype=np.uint64)).shape == (0, DIM)
    assert index.vectors(np.array([99], dtype=np.uint64)).shape == (0, DIM)
    assert index.vectors(np.array([2, 3], dtype=np.uint64)).shape == (2, DIM)
