"""What the console's entity pages and the graph view read of the in-memory rows and graph, each
by name (``EntityPageReads``, which the store is): degrees, rankings by degree, an entity's
relations and neighbourhood, the entities picked for a merge. Each read holds the store's lock
once, in a worker thread, and returns copies; rankings of the whole graph sort outside the lock (a
sort of 500k degrees would stall every chat stream on the event loop)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio.to_thread
import numpy as np

from proxy.store.protocols.graph import Graph
from proxy.store.rows_memory import EntityMeta, MemoryRows

T = TypeVar("T")


@dataclass(frozen=True)
class Node:
    key: str  # entity identity (case-folded name); used in links
    name: str  # display name (untrusted)
    type: str  # entity type (untrusted); decides the colour
    degree: int


@dataclass(frozen=True)
class Edge:
    source: str  # node key
    target: str  # node key
    weight: float
    label: str = ""  # relation keywords, for instance (untrusted), shown as a tooltip


def ranked(degree: np.ndarray, keys: np.ndarray, descending: bool) -> np.ndarray:
    """Positions by degree, ties by key: the same order whether or not a filter applies."""
    if not len(degree):
        return np.empty(0, dtype=np.int64)
    return np.lexsort((keys.astype(str), -degree if descending else degree))


def metas(keys: list[str], degrees: dict[str, int], rows: MemoryRows,
          graph: Graph) -> list[tuple[EntityMeta, int]]:
    out = []
    for key in keys:
        meta = rows.entity(key)
        if meta is not None:
            out.append((meta, degrees.get(key, 0)))
    return out


def metas_with_degrees(keys: list[str], rows: MemoryRows, graph: Graph) -> list[tuple[EntityMeta, int]]:
    return metas(keys, graph.degrees(keys), rows, graph)


def degrees_of(keys: list[str], rows: MemoryRows, graph: Graph) -> dict[str, int]:
    return graph.degrees(keys)


def all_degrees(rows: MemoryRows, graph: Graph) -> tuple[list[str], np.ndarray]:
    return graph.all_degrees()


def entity_meta(key: str, rows: MemoryRows, graph: Graph) -> EntityMeta | None:
    return rows.entity(key)  # a record replaced whole on change, never changed in place


def degree(key: str, rows: MemoryRows, graph: Graph) -> int:
    return graph.degree(key)


def summary(key: str, rows: MemoryRows, graph: Graph) -> tuple[EntityMeta, int] | None:
    meta = rows.entity(key)
    return None if meta is None else (meta, graph.degree(key))


def relations_of(key: str, limit: int, rows: MemoryRows,
                 graph: Graph) -> tuple[list[dict[str, Any]], int, list[tuple[int, str]]]:
    """The entity's relations, heaviest first (from the graph and the rows: a scan of the relations
    table costs tens of milliseconds at 200k relations), how many, and the shown ones' vector keys."""
    found = []
    for other in graph.neighbour_names(key):
        meta = rows.relation("\x1f".join(sorted((key, other))))
        if meta is not None:
            found.append((meta, other))
    found.sort(key=lambda item: (-item[0].weight, item[1]))
    shown = []
    for meta, other in found[:limit]:
        entity = rows.entity(other)
        shown.append({"pair": meta.pair, "other": entity.name if entity else other, "other_key": other,
                      "keywords": list(meta.keywords), "weight": meta.weight})
    return shown, len(found), [(meta.key, meta.pair) for meta, _ in found[:limit]]


def neighbourhood(key: str, depth: int, cap: int, rows: MemoryRows, graph: Graph) -> tuple[list[Node], list[Edge]]:
    """The entity and its neighbours up to ``depth`` hops, at most ``cap`` nodes (``Graph.around``)."""
    vertices, links = graph.around(key, depth, cap)
    nodes = []
    for name, vertex_degree in vertices:
        meta = rows.entity(name)
        nodes.append(Node(name, meta.name if meta else name, meta.type if meta else "unknown", vertex_degree))
    edges = []
    for a, b, weight in links:
        relation = rows.relation("\x1f".join(sorted((a, b))))
        edges.append(Edge(a, b, weight, ", ".join(relation.keywords) if relation else ""))
    return sorted(nodes, key=lambda n: n.key), edges


def entity_view(key: str, limit: int, depth: int, cap: int, rows: MemoryRows,
                graph: Graph) -> tuple[tuple[list[dict[str, Any]], int, list[tuple[int, str]]],
                                             tuple[list[Node], list[Edge]], int]:
    """What an entity's page reads from memory, in one hold of the lock: its relations
    (``relations_of``), its neighbourhood and its degree."""
    return (relations_of(key, limit, rows, graph), neighbourhood(key, depth, cap, rows, graph),
            graph.degree(key))


def picked(keys: list[str], rows: MemoryRows, graph: Graph) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The entities picked for a merge, as the merge pages show them, and their vector keys."""
    degrees = graph.degrees(keys)
    out, vector_keys = [], []
    for key in keys:
        meta = rows.entity(key)
        if meta is not None:
            out.append({"key": key, "name": meta.name, "type": meta.type,
                        "degree": degrees.get(key, 0), "sources": len(meta.source_ids)})
            vector_keys.append((meta.key, key))
    return out, vector_keys


def surroundings(key: str, depth: int, cap: int, rows: MemoryRows,
                 graph: Graph) -> tuple[list[dict[str, Any]], list[tuple[int, str, dict[str, Any]]], bool]:
    """The entity and up to ``cap`` neighbours (the graph's order), the relations among them (vector
    key, pair key, what is shown), and whether more were left out."""
    vertices, links = graph.around(key, depth, cap + 1)  # the entity and up to ``cap`` neighbours
    entities = []
    for name, vertex_degree in vertices:
        meta = rows.entity(name)
        entities.append({"name": meta.name if meta else name, "type": meta.type if meta else "unknown",
                         "degree": vertex_degree})
    relations = []
    for a, b, _ in links:
        relation = rows.relation("\x1f".join(sorted((a, b))))
        if relation is None:
            continue
        names = [(m.name if (m := rows.entity(k)) else k) for k in (relation.source, relation.target)]
        relations.append((relation.key, relation.pair, {"source": names[0], "target": names[1],
                                                        "keywords": list(relation.keywords),
                                                        "weight": relation.weight,
                                                        "direct": key in (relation.source, relation.target)}))
    return entities, relations, len(vertices) > cap


def near(keys: list[tuple[int, float]], kind: str, limit: int, rows: MemoryRows,
         graph: Graph) -> list[tuple[int, str, str, str, int, int, float]]:
    """(vector key, name key, name, type, degree, sources, score) of the entities of ``keys`` (a
    search's), of type ``kind`` when given, at most ``limit``."""
    out = []
    for key, score in keys:
        meta = rows.entities.get(key)
        if meta is None or kind and meta.type.lower() != kind.lower():
            continue
        out.append((key, meta.name_key, meta.name, meta.type, graph.degree(meta.name_key), len(meta.source_ids),
                    score))
        if len(out) == limit:
            break
    return out


class EntityPageReads:
    """The entity pages' named reads, over ``read_memory_sync`` (the store's)."""

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        raise NotImplementedError

    async def _read(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        return await anyio.to_thread.run_sync(self.read_memory_sync, read)

    async def entities_with_degrees(self, keys: list[str]) -> list[tuple[EntityMeta, int]]:
        return await self._read(functools.partial(metas_with_degrees, keys))

    async def entity_row(self, key: str) -> EntityMeta | None:
        return await self._read(functools.partial(entity_meta, key))

    async def entity_degree(self, key: str) -> int:
        return await self._read(functools.partial(degree, key))

    async def entity_summary(self, key: str) -> tuple[EntityMeta, int] | None:
        return await self._read(functools.partial(summary, key))

    async def entity_view(self, key: str, limit: int, depth: int, cap: int) -> tuple[
            tuple[list[dict[str, Any]], int, list[tuple[int, str]]], tuple[list[Node], list[Edge]], int]:
        """An entity's relations (at most ``limit``, heaviest first), its neighbourhood and its degree."""
        return await self._read(functools.partial(entity_view, key, limit, depth, cap))

    async def entity_neighbourhood(self, key: str, depth: int, cap: int) -> tuple[list[Node], list[Edge]]:
        return await self._read(functools.partial(neighbourhood, key, depth, cap))

    async def picked_entities(self, keys: list[str]) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
        return await self._read(functools.partial(picked, keys))

    async def entity_surroundings(self, key: str, depth: int, cap: int) -> tuple[
            list[dict[str, Any]], list[tuple[int, str, dict[str, Any]]], bool]:
        return await self._read(functools.partial(surroundings, key, depth, cap))

    async def entities_near(self, keys: list[tuple[int, float]], kind: str,
                            limit: int) -> list[tuple[int, str, str, str, int, int, float]]:
        return await self._read(functools.partial(near, keys, kind, limit))

    def ranked_entities_sync(self, keys: list[str] | None, descending: bool, limit: int,
                             offset: int) -> tuple[list[tuple[EntityMeta, int]], int]:
        """One page of ``keys`` (a filter's matches; None: every entity) ranked by degree, and how
        many there are. Blocking."""
        if keys is not None:
            degrees = self.read_memory_sync(functools.partial(degrees_of, keys))
            order = ranked(np.asarray([degrees[k] for k in keys]), np.asarray(keys, dtype=object), descending)
            page = [keys[int(i)] for i in order[offset:offset + limit]]
            return self.read_memory_sync(functools.partial(metas, page, degrees)), len(keys)
        names, degree_of = self.read_memory_sync(all_degrees)
        if not names:
            return [], 0
        order = ranked(degree_of, np.asarray(names, dtype=object), descending)[offset:offset + limit]
        chosen = [names[int(i)] for i in order]
        page_degrees = dict(zip(chosen, (int(degree_of[i]) for i in order), strict=True))
        return self.read_memory_sync(functools.partial(metas, chosen, page_degrees)), len(names)
