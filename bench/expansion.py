"""Multi-hop expansion (proxy/store/graph_igraph.py): the time of one expansion's two graph steps,
the seeds' neighbourhood (up to two hops, at most ``--cap`` entities) and the personalised
PageRank over it, on synthetic graphs of 10k / 100k / 1M entities.

The graph is skewed like a real knowledge graph: each entity has three edges to others drawn
with a bias to low numbers, so a few hubs have tens of thousands of edges and most entities a
handful. The seeds are one to three random entities, a hub among them one time in five. Edge
weights are constant here: in retrieval they are the edges' relevance to the question, read for
the neighbourhood's edges only (their number is printed: that read grows with it, not with the graph).

    python bench/expansion.py [--sizes 10000 100000 1000000] [--queries 200] [--cap 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proxy.retrieval.channels.expansion import CAP, DAMPING, HOPS  # noqa: E402
from proxy.store.graph_igraph import EntityGraph  # noqa: E402

EDGES_PER_ENTITY = 3
SKEW = 3.0   # an edge's far end is entity int(n * u ** SKEW): low numbers are hubs


def synthetic(size: int, rng: np.random.Generator) -> EntityGraph:
    sources = np.repeat(np.arange(size, dtype=np.int64), EDGES_PER_ENTITY)
    targets = (size * rng.random(len(sources)) ** SKEW).astype(np.int64)
    keep = sources != targets
    ends = np.stack([sources[keep], targets[keep]], axis=1)
    graph = EntityGraph()
    graph.load([f"e{i}" for i in range(size)], ends, [1.0] * len(ends))
    return graph


def seeds(size: int, rng: random.Random) -> dict[str, float]:
    chosen = {f"e{rng.randrange(size)}": 1.0 for _ in range(rng.randint(1, 3))}
    if rng.random() < 0.2:
        chosen[f"e{rng.randrange(20)}"] = 0.5
    return chosen


def percentile(values: list[float], share: float) -> float:
    return sorted(values)[min(len(values) - 1, int(share * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cap", type=int, default=CAP)
    args = parser.parse_args()
    print(f"hops {HOPS}, cap {args.cap} entities, damping {DAMPING}; times in ms per expansion\n")
    print("| entities | edges | build s | neighbourhood p50 / p95 | PageRank p50 / p95 | total p50 / p95 / max "
          "| edges walked p50 / max |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        start = time.perf_counter()
        graph = synthetic(size, np.random.default_rng(size))
        built = time.perf_counter() - start
        rng = random.Random(size)
        near, walk, total, walked = [], [], [], []
        for _ in range(args.queries):
            chosen = seeds(size, rng)
            t0 = time.perf_counter()
            edges = graph.neighbourhood_edges(list(chosen), HOPS, args.cap)
            t1 = time.perf_counter()
            graph.personalized_pagerank(chosen, edges, [1.0] * len(edges), DAMPING)
            t2 = time.perf_counter()
            near.append((t1 - t0) * 1000)
            walk.append((t2 - t1) * 1000)
            total.append((t2 - t0) * 1000)
            walked.append(len(edges))
        print(f"| {size:,} | {graph.edge_count:,} | {built:.1f} "
              f"| {statistics.median(near):.1f} / {percentile(near, 0.95):.1f} "
              f"| {statistics.median(walk):.1f} / {percentile(walk, 0.95):.1f} "
              f"| {statistics.median(total):.1f} / {percentile(total, 0.95):.1f} / {max(total):.1f} "
              f"| {int(statistics.median(walked)):,} / {max(walked):,} |", flush=True)


if __name__ == "__main__":
    main()
