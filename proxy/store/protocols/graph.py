"""The entity graph held in memory: entities are vertices named by their name key, relations
weighted undirected edges. Derived from the tables at start-up and changed after every commit.
igraph today (``proxy/store/graph_igraph.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np


class Graph(Protocol):
    def load(self, names: list[str], ends: np.ndarray, weights: list[float]) -> None:
        """A new graph: vertex i is named ``names[i]``; edge j joins the vertices in ``ends[j]``."""

    @property
    def vertex_count(self) -> int: ...

    @property
    def edge_count(self) -> int: ...

    def has(self, key: str) -> bool: ...

    def names(self) -> set[str]: ...

    def edge_pairs(self) -> set[tuple[str, str]]: ...

    def add_entities(self, keys: Iterable[str]) -> None: ...

    def remove_entities(self, keys: Iterable[str]) -> None: ...

    def set_edges(self, edges: Iterable[tuple[str, str, float]]) -> None: ...

    def remove_edges(self, pairs: Iterable[tuple[str, str]]) -> None: ...

    def degree(self, key: str) -> int: ...

    def degrees(self, keys: list[str]) -> dict[str, int]: ...

    def neighbourhood(self, key: str, depth: int = 1) -> list[str]: ...

    # the console's entity pages and merge suggestions (proxy/store/entity_page_reads.py)

    def neighbour_names(self, key: str) -> list[str]: ...

    def all_degrees(self) -> tuple[list[str], np.ndarray]:
        """Every vertex's name and degree, in vertex order (copies)."""

    def best_connected(self, count: int) -> list[str]: ...

    def around(self, key: str, depth: int, cap: int) -> tuple[list[tuple[str, int]], list[tuple[str, str, float]]]:
        """At most ``cap`` vertices up to ``depth`` hops from ``key``, ring by ring, best connected
        first: (name, degree) in vertex order, and the (source, target, weight) edges among them."""

    def copy(self) -> Graph:
        """A copy of the graph, cheap enough to take under the store's lock."""

    def snapshot(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Every vertex's name, each edge's two vertex numbers and its weight (copies: the
        communities are computed from them outside the store's lock)."""

    # multi-hop expansion (proxy/retrieval/channels/expansion.py, through store.neighbourhood_sync and
    # store.pagerank_sync)

    def neighbourhood_edges(self, seeds: list[str], hops: int, cap: int,
                            edge_cap: int | None = None) -> list[tuple[str, str]]:
        """The edges among the seeds and their neighbours up to ``hops`` away, at most ``cap``
        vertices (ring by ring, best connected first) and ``edge_cap`` edges (nearest the seeds first)."""

    def personalized_pagerank(self, seeds: dict[str, float], edges: list[tuple[str, str]], weights: list[float],
                              damping: float) -> dict[str, float]:
        """PageRank over the given weighted edges, restarting at the seeds: vertex -> score. Reads
        only its arguments (safe outside the store's lock)."""
