"""Recall of the vector index element types (f32, f16, i8) on synthetic 768-d embeddings.

USearch's own i8 cast scales a unit vector by 127, so a 768-d embedding's components (about
+-0.04) keep a handful of levels and embeddings that share a common direction (as many models'
do) keep little resolution for what tells them apart. GraphGate quantises i8 itself, scaling each
vector so that its largest component is +-127 (proxy/store/vectors_usearch.py): this bench is why
that is the default. Two corpora of N vectors: isotropic clusters, and the same with a shared
offset and a few dominant dimensions. Top-10 recall against brute force, with exact search (the
element type alone) and with HNSW at GraphGate's settings, plus USearch's i8 oversampled 3x and
re-ranked with the exact vectors (what a re-ranking design would recover).

    python bench/index_recall.py [--n 20000] [--queries 300]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proxy.store.vectors_usearch import VectorIndex  # noqa: E402

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
        noise = 0.05 * rng.standard_normal((args.queries, DIM)).astype(np.float32)
        q = v[rng.integers(0, args.n, args.queries)] + noise
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        truth = [set(np.argsort(-(v @ x))[:10].tolist()) for x in q]
        label = "shared direction" if shared else "isotropic"
        for dtype in ("f32", "f16", "i8", "i8 (USearch's cast)"):
            ours = VectorIndex(Path("unused.usearch"), dtype.split()[0])
            prepare: Callable[[np.ndarray], np.ndarray]
            if dtype == "i8":  # quantised as the gateway does
                ours.add(np.arange(args.n, dtype=np.uint64), v)
                if ours.index is None:
                    raise RuntimeError("adding vectors left the index unmade")
                index, prepare = ours.index, ours._prepare
            else:  # the rest as USearch casts them, with the gateway's HNSW settings
                index, prepare = ours._new(DIM), (lambda x: x)
                index.add(np.arange(args.n, dtype=np.uint64), v)
            exact = recall([index.search(prepare(x).reshape(-1), 10, exact=True).keys.astype(int) for x in q], truth)
            hnsw = recall([index.search(prepare(x).reshape(-1), 10).keys.astype(int) for x in q], truth)
            line = f"{label:17s} {dtype:20s}: top-10 recall exact {exact:.3f}, HNSW {hnsw:.3f}"
            if dtype != "i8" and dtype.startswith("i8"):
                reranked = []
                for x in q:
                    candidates = index.search(x, 30).keys.astype(int)
                    reranked.append(candidates[np.argsort(-(v[candidates] @ x))][:10])
                line += f", oversampled 3x and re-ranked exactly {recall(reranked, truth):.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
