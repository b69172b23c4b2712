"""The entity graph in igraph: entities are vertices (named by name_key), relations weighted edges.

Loaded from the tables at start-up and changed after every commit; degrees and neighbourhoods
for retrieval and the console come from here.
"""

from __future__ import annotations

from collections.abc import Iterable

import igraph
import numpy as np


class EntityGraph:
    def __init__(self) -> None:
        self.g = igraph.Graph(directed=False)

    def load(self, names: list[str], ends: np.ndarray, weights: list[float]) -> None:
        """A new graph: vertex i is named ``names[i]``; edge j joins the vertices in ``ends[j]``."""
        graph = igraph.Graph(n=len(names), edges=ends.reshape(-1, 2), directed=False)
        graph.vs["name"] = names
        graph.es["weight"] = weights
        self.g = graph

    @property
    def vertex_count(self) -> int:
        return self.g.vcount()

    @property
    def edge_count(self) -> int:
        return self.g.ecount()

    def has(self, key: str) -> bool:
        try:
            self.g.vs.find(name=key)
        except (ValueError, KeyError):
            return False
        return True

    def names(self) -> set[str]:
        return set(self.g.vs["name"]) if self.g.vcount() else set()

    def edge_pairs(self) -> set[tuple[str, str]]:
        names = self.g.vs["name"] if self.g.vcount() else []
        return {tuple(sorted((names[e.source], names[e.target]))) for e in self.g.es}  # type: ignore[misc]

    def add_entities(self, keys: Iterable[str]) -> None:
        new = [k for k in dict.fromkeys(keys) if not self.has(k)]
        if new:
            self.g.add_vertices(len(new), attributes={"name": new})

    def remove_entities(self, keys: Iterable[str]) -> None:
        present = [k for k in set(keys) if self.has(k)]
        if present:
            self.g.delete_vertices(present)

    def set_edges(self, edges: Iterable[tuple[str, str, float]]) -> None:
        """Add edges or update their weights (endpoints must exist)."""
        new_pairs, new_weights = [], []
        for source, target, weight in edges:
            eid = self.g.get_eid(source, target, directed=False, error=False)
            if eid >= 0:
                self.g.es[eid]["weight"] = weight
            else:
                new_pairs.append((source, target))
                new_weights.append(weight)
        if new_pairs:
            self.g.add_edges(new_pairs, attributes={"weight": new_weights})

    def remove_edges(self, pairs: Iterable[tuple[str, str]]) -> None:
        eids = []
        for source, target in pairs:
            if self.has(source) and self.has(target):
                eid = self.g.get_eid(source, target, directed=False, error=False)
                if eid >= 0:
                    eids.append(eid)
        if eids:
            self.g.delete_edges(eids)

    def degree(self, key: str) -> int:
        return self.g.degree(key) if self.has(key) else 0

    def degrees(self, keys: list[str]) -> dict[str, int]:
        """Degrees of many vertices in one igraph call (0 for a name the graph does not have)."""
        try:
            return dict(zip(keys, self.g.degree(keys), strict=True))
        except ValueError:  # some name is missing: one at a time
            return {key: self.degree(key) for key in keys}

    def neighbourhood(self, key: str, depth: int = 1) -> list[str]:
        if not self.has(key):
            return []
        if depth == 1:  # igraph's neighborhood() costs ~0.15 ms a call at 500k vertices, neighbors() ~1 us
            vertex = self.g.vs.find(name=key).index
            ids = list(dict.fromkeys([vertex, *self.g.neighbors(vertex)]))
        else:
            ids = self.g.neighborhood(key, order=depth)
        # only the neighbours' names: g.vs["name"] would copy every vertex's name each call
        return self.g.vs.select(ids)["name"]
