"""Leiden communities of the entity graph (igraph's ``community_leiden``, modularity), for the
community summaries that answer global questions.

It works on a copy of the graph taken under the store's lock (``EntityGraph.snapshot``), so the
partition itself never holds the lock. The result depends only on the graph's content: vertices
are renumbered by name and edges sorted before Leiden runs, and igraph's random numbers come from
a fixed seed; an unchanged graph (after a restart, say) gives the same communities, which keep
their summaries. A community larger than ``max_size`` is split by Leiden on its own subgraph, so
that a summary stays about one theme and its prompt stays small.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import igraph
import numpy as np

SEED = 18
SPLIT_DEPTH = 3   # how many times a too large community is split again
_RNG = threading.Lock()   # igraph's random number generator is the process's: one Leiden at a time


@dataclass(frozen=True)
class Community:
    members: list[str]                      # entity keys, most central (degree inside) first
    edges: list[tuple[str, str, float]]     # the relations among them, heaviest first


def _leiden(count: int, ends: np.ndarray, weights: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """The Leiden membership of ``count`` vertices (modularity; two iterations, igraph's default:
    until stable costs 20x the time at 100k entities for 2 % more modularity)."""
    graph = igraph.Graph(n=count, edges=ends, directed=False)
    with _RNG:
        igraph.set_random_number_generator(random.Random(SEED))
        try:
            found = graph.community_leiden(objective_function="modularity", initial_membership=initial.tolist(),
                                           weights=weights.tolist() if len(weights) else None, n_iterations=2)
        finally:
            igraph.set_random_number_generator(random)
    return np.asarray(found.membership, dtype=np.int64)


def _split_large(membership: np.ndarray, ends: np.ndarray, weights: np.ndarray, initial: np.ndarray,
                 max_size: int, depth: int) -> np.ndarray:
    """Communities above ``max_size`` members partitioned again on their own subgraph."""
    sizes = np.bincount(membership)
    large = np.flatnonzero(sizes > max_size)
    if depth == 0 or not len(large):
        return membership
    membership = membership.copy()
    next_label = int(membership.max()) + 1
    # vertices and inner edges grouped by community once (not one scan of the graph per community)
    by_vertex = np.argsort(membership, kind="stable")
    vertex_starts = np.concatenate([[0], np.cumsum(sizes)])
    edge_label = np.where(membership[ends[:, 0]] == membership[ends[:, 1]], membership[ends[:, 0]], -1) \
        if len(ends) else np.zeros(0, dtype=np.int64)
    by_edge = np.argsort(edge_label, kind="stable")
    edge_bounds = np.searchsorted(edge_label[by_edge], np.stack([large, large + 1]), side="left")
    local = np.zeros(len(membership), dtype=np.int64)
    for i, label in enumerate(large.tolist()):
        vertices = by_vertex[vertex_starts[label]:vertex_starts[label + 1]]
        local[vertices] = np.arange(len(vertices))
        mine = by_edge[edge_bounds[0, i]:edge_bounds[1, i]]
        sub_ends, sub_weights = local[ends[mine]], weights[mine]
        sub_initial = np.unique(initial[vertices], return_inverse=True)[1]
        sub = _leiden(len(vertices), sub_ends, sub_weights, sub_initial)
        if sub.max() == 0:   # Leiden keeps it whole: it stays one community (its prompt is capped)
            continue
        sub = _split_large(sub, sub_ends, sub_weights, sub_initial, max_size, depth - 1)
        membership[vertices] = next_label + sub
        next_label += int(sub.max()) + 1
    return membership


def leiden_communities(names: list[str], ends: np.ndarray, weights: np.ndarray, *, min_size: int,
                       max_size: int, previous: list[list[str]] | None = None) -> list[Community]:
    """The communities of at least ``min_size`` members of the graph whose vertex i is ``names[i]``
    and whose edge j joins the vertices ``ends[j]`` with weight ``weights[j]``; largest first.
    Leiden starts from the ``previous`` communities (each other vertex alone), so that a change
    to the graph moves the communities near it, not the whole partition."""
    if not names:
        return []
    order = np.argsort(np.asarray(names, dtype=object), kind="stable")   # canonical: by name
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    ends = rank[np.asarray(ends, dtype=np.int64).reshape(-1, 2)]
    ends = np.sort(ends, axis=1)
    edge_order = np.lexsort((ends[:, 1], ends[:, 0])) if len(ends) else np.zeros(0, dtype=np.int64)
    ends, weights = ends[edge_order], np.asarray(weights, dtype=np.float64)[edge_order]
    sorted_names = [names[i] for i in order.tolist()]
    initial = _initial(sorted_names, previous or [])
    membership = _split_large(_leiden(len(names), ends, weights, initial), ends, weights, initial, max_size,
                              SPLIT_DEPTH)
    return _communities(sorted_names, membership, ends, weights, min_size)


def _initial(names: list[str], previous: list[list[str]]) -> np.ndarray:
    """Each vertex's starting community: its previous one, or one of its own."""
    label = {name: i for i, members in enumerate(previous) for name in members}
    start = len(previous)
    initial = np.empty(len(names), dtype=np.int64)
    for vertex, name in enumerate(names):
        found = label.get(name)
        if found is None:
            found, start = start, start + 1
        initial[vertex] = found
    return np.unique(initial, return_inverse=True)[1]


def _communities(names: list[str], membership: np.ndarray, ends: np.ndarray, weights: np.ndarray,
                 min_size: int) -> list[Community]:
    sizes = np.bincount(membership)
    kept = np.flatnonzero(sizes >= min_size)
    if not len(kept):
        return []
    degree = np.bincount(ends.ravel(), minlength=len(names)) if len(ends) else np.zeros(len(names), dtype=np.int64)
    by_label: dict[int, list[int]] = {int(label): [] for label in kept.tolist()}
    for vertex, label in enumerate(membership.tolist()):
        if label in by_label:
            by_label[label].append(vertex)
    edges: dict[int, list[tuple[float, int, int]]] = {label: [] for label in by_label}
    if len(ends):
        inside = np.flatnonzero(membership[ends[:, 0]] == membership[ends[:, 1]])
        for j in inside.tolist():
            label = int(membership[ends[j, 0]])
            if label in edges:
                edges[label].append((float(weights[j]), int(ends[j, 0]), int(ends[j, 1])))
    found = []
    for label, vertices in by_label.items():
        internal = edges[label]
        inner_degree: dict[int, int] = dict.fromkeys(vertices, 0)
        for _, s, t in internal:
            inner_degree[s] += 1
            inner_degree[t] += 1
        vertices.sort(key=lambda v: (-inner_degree[v], -int(degree[v]), names[v]))
        internal.sort(key=lambda e: (-e[0], names[e[1]], names[e[2]]))
        found.append(Community([names[v] for v in vertices], [(names[s], names[t], w) for w, s, t in internal]))
    found.sort(key=lambda c: (-len(c.members), c.members[0]))
    return found
