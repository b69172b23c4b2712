"""Recall of the vector index element types (f32, f16, i8) on synthetic 768-d embeddings.

Why f16 is the default and i8 only a setting: USearch's i8 normalises a vector and scales it by
127, so embeddings that share a common direction (as many models' do) keep little resolution for
what tells them apart. Two corpora of N vectors: isotropic clusters, and the same with a shared
offset and a few dominant dimensions. Top-10 recall against brute force, with exact search (the
element type alone) and with HNSW (as GraphGate searches), plus i8 oversampled 3x and re-ranked
with the exact vectors (what a re-ranking design would recover).

    python bench/index_recall.py [--n 20000] [--queries 300]
"""

from __future__ import annotations

import argparse

import numpy as np
from usearch.index import Index

DIM = 768


def corpus(rng: np.random.Generator, n: int, shared: bool) -> np.ndarray:
    topics = rng.standard_normal((300, DIM)).astype(np.float32)
    v = topics[rng.integers(0, 300, n)] * 0.6 + rng.standard_normal((n, DIM)).astype(np.float32) * 0.5
    if shared:  # a common offset and a dozen strong dimensions, as in many embedding models
        scale = np.ones(DIM, dtype=np.float32)
        scale[rng.choice(DIM, 12, replace=False)] = 6.0
        v = v * scale * 0.3 + rng.standard_normal(DIM).astype(np.float32) * 0.5
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def recall(found: list[np.ndarray], truth: list[set[int]]) -> float:
    return float(np.mean([len(set(f.tolist()) & t) / 10 for f, t in zip(found, truth, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    for shared in (False, True):
        v = corpus(rng, args.n, shared)
        q = v[rng.integers(0, args.n, args.queries)] + 0.05 * rng.standard_normal((args.queries, DIM)).astype(np.float32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        truth = [set(np.argsort(-(v @ x))[:10].tolist()) for x in q]
        label = "shared direction" if shared else "isotropic"
        for dtype in ("f32", "f16", "i8"):
            index = Index(ndim=DIM, metric="cos", dtype=dtype, connectivity=16, expansion_add=40, expansion_search=64)
            index.add(np.arange(args.n, dtype=np.uint64), v)
            exact = recall([index.search(x, 10, exact=True).keys.astype(int) for x in q], truth)
            hnsw = recall([index.search(x, 10).keys.astype(int) for x in q], truth)
            line = f"{label:17s} {dtype}: top-10 recall exact {exact:.3f}, HNSW {hnsw:.3f}"
            if dtype == "i8":
                reranked = []
                for x in q:
                    candidates = index.search(x, 30).keys.astype(int)
                    reranked.append(candidates[np.argsort(-(v[candidates] @ x))][:10])
                line += f", oversampled 3x and re-ranked exactly {recall(reranked, truth):.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
