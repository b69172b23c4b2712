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
        return {tuple(sorted((names[e.source], names[e.target]))) for e in self.g.es}

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

    # --- whole-graph and neighbourhood reads for the console and merge suggestions ---

    def neighbour_names(self, key: str) -> list[str]:
        """The names of ``key``'s neighbours (not itself), in vertex order."""
        if not self.has(key):
            return []
        return self.g.vs.select(self.g.neighbors(key))["name"]

    def all_degrees(self) -> tuple[list[str], np.ndarray]:
        """Every vertex's name and degree, in vertex order (copies: safe to use after the lock)."""
        if self.g.vcount() == 0:
            return [], np.empty(0, dtype=np.int64)
        return list(self.g.vs["name"]), np.asarray(self.g.degree())

    def best_connected(self, count: int) -> list[str]:
        """The names of the ``count`` vertices of highest degree (ties in vertex order)."""
        order = np.argsort(-np.asarray(self.g.degree()), kind="stable")[:count]
        return self.g.vs.select([int(i) for i in order])["name"] if len(order) else []

    def around(self, key: str, depth: int, cap: int) -> tuple[list[tuple[str, int]], list[tuple[str, str, float]]]:
        """The vertex and its neighbours up to ``depth`` hops, at most ``cap`` of them: ring by ring,
        the best connected of each ring first, stopping when the cap is reached (a hub's second ring
        can hold half the graph). (name, degree) in vertex order, and the edges among them."""
        if not self.has(key):
            return [], []
        graph = self.g
        centre = graph.vs.find(name=key).index
        chosen = [centre]
        for ring in range(1, depth + 1):
            if len(chosen) >= cap:
                break
            members = np.asarray(graph.neighborhood(centre, order=ring, mindist=ring), dtype=np.int64)
            if not len(members):
                break
            degree = np.asarray(graph.degree(members.tolist()))
            room = cap - len(chosen)
            chosen.extend(int(v) for v in members[np.lexsort((members, -degree))][:room])
        degrees = dict(zip(chosen, graph.degree(chosen), strict=True))
        sub = graph.induced_subgraph(chosen)  # keeps the graph's vertex order, not ``chosen``'s
        names = sub.vs["name"]
        vertices = [(name, degrees[vertex]) for name, vertex in zip(names, sorted(chosen), strict=True)]
        edges = [(names[e.source], names[e.target], float(e["weight"] or 1.0)) for e in sub.es]
        return vertices, edges

    def copy(self) -> EntityGraph:
        """A copy of the graph (60 ms at 1M entities, in igraph's C core): work over the whole graph
        (communities) reads it after the store's lock is released."""
        copied = EntityGraph()
        copied.g = self.g.copy()
        return copied

    def snapshot(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Every vertex's name, each edge's two vertex numbers and its weight, as plain arrays
        (1.2 s at 1M entities: read from a ``copy``, outside the store's lock)."""
        graph = self.g
        names = list(graph.vs["name"]) if graph.vcount() else []
        ends = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        weights = np.asarray([1.0 if w is None else w for w in graph.es["weight"]] if graph.ecount() else [],
                             dtype=np.float64)
        return names, ends, weights

    # --- multi-hop expansion (retrieval's personalised PageRank) ---

    def neighbourhood_edges(self, seeds: list[str], hops: int, cap: int,
                            edge_cap: int | None = None) -> list[tuple[str, str]]:
        """The edges among the seeds and their neighbours up to ``hops`` away, at most ``cap``
        vertices: ring by ring, the best connected of each ring first (a hub's second ring can hold
        half the graph), so the cost is bounded by ``cap``, not by the graph's size. In a dense
        graph those vertices can share tens of thousands of edges: at most ``edge_cap`` are kept,
        those nearest the seeds first (an edge ranks by its nearer end's place in that order)."""
        graph = self.g
        starts = [graph.vs.find(name=key).index for key in dict.fromkeys(seeds) if self.has(key)]
        chosen = dict.fromkeys(starts)
        frontier = starts
        for _ in range(hops):
            if len(chosen) >= cap or not frontier:
                break
            ring = list(dict.fromkeys(n for v in frontier for n in graph.neighbors(v) if n not in chosen))
            if not ring:
                break
            members = np.asarray(ring, dtype=np.int64)
            degree = np.asarray(graph.degree(ring))
            frontier = [int(v) for v in members[np.lexsort((members, -degree))][:cap - len(chosen)]]
            chosen.update(dict.fromkeys(frontier))
        if edge_cap is not None:
            return self._nearest_edges(list(chosen), edge_cap)
        sub = graph.induced_subgraph(list(chosen))
        names = sub.vs["name"]
        return [(names[s], names[t]) for s, t in sub.get_edgelist()]

    def _nearest_edges(self, chosen: list[int], edge_cap: int) -> list[tuple[str, str]]:
        """The ``edge_cap`` edges among ``chosen`` nearest its start: by the place of the nearer end,
        then of the farther (the order ``chosen`` was reached in), in the graph's edge order. Read
        vertex by vertex until the cap is met: in a dense graph the ``chosen`` share tens of thousands
        of edges, and listing them all (an induced subgraph) cost more than the rest of the walk."""
        graph = self.g
        place = {vertex: i for i, vertex in enumerate(chosen)}
        ends: list[tuple[int, int]] = []
        for i, vertex in enumerate(chosen):
            later = sorted({place[n] for n in graph.neighbors(vertex) if place.get(n, -1) >= i})
            ends.extend((vertex, chosen[j]) for j in later)
            if len(ends) >= edge_cap:
                break
        ends = ends[:edge_cap]
        if not ends:
            return []
        pairs = [edge.tuple for edge in graph.es[sorted(graph.get_eids(ends))]]
        ids = list(dict.fromkeys(v for pair in pairs for v in pair))   # the ends' names only, not the graph's
        names = dict(zip(ids, graph.vs[ids]["name"], strict=True))
        return [(names[s], names[t]) for s, t in pairs]

    def personalized_pagerank(self, seeds: dict[str, float], edges: list[tuple[str, str]], weights: list[float],
                              damping: float) -> dict[str, float]:
        """PageRank over ``edges`` (weighted, undirected) restarting at ``seeds`` in proportion to
        their weights: every vertex of the edges (and each seed) with its score. It reads only its
        arguments, not the store's graph, so it runs outside the store's lock."""
        names = list(dict.fromkeys([*seeds, *(key for pair in edges for key in pair)]))
        if not names:
            return {}
        index = {key: i for i, key in enumerate(names)}
        graph = igraph.Graph(n=len(names), edges=[(index[s], index[t]) for s, t in edges], directed=False)
        reset = [max(seeds.get(key, 0.0), 0.0) for key in names]
        if not any(reset):
            return {}
        scores = graph.personalized_pagerank(damping=damping, reset=reset, weights=weights or None,
                                             directed=False)
        return dict(zip(names, scores, strict=True))


def force_layout(count: int, pairs: list[tuple[int, int]]) -> list[tuple[float, float]]:
    """Positions for ``count`` points joined by ``pairs``: Kamada-Kawai from a circle. A fixed start
    (the circle) instead of a random one makes the drawing a pure function of the input;
    Fruchterman-Reingold would still consult igraph's RNG (Python's global ``random``)."""
    if count == 1:
        return [(0.0, 0.0)]
    graph = igraph.Graph(n=count, edges=pairs)
    layout = graph.layout_kamada_kawai(seed=graph.layout_circle().coords)
    return [(float(x), float(y)) for x, y in layout.coords]
