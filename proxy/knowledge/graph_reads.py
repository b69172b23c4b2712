"""What the entity pages read from the in-memory rows and graph: degrees, rankings, an entity's
relations and neighbourhood. Each ``fn(..., rows, graph)`` runs under the store's lock in a worker
thread (``store.read_memory``) and returns copies; rankings of the whole graph run in a worker
thread too (a sort of 500k degrees would stall every chat stream on the event loop)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from proxy.store.protocols.graph import Graph
from proxy.store.rows_memory import EntityMeta, MemoryRows
from proxy.store.store import KnowledgeStore


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


@dataclass
class ListedEntity:
    name_key: str
    name: str
    type: str
    source_ids: tuple[str, ...]
    description: str


@dataclass
class EntityListing:
    rows: list[tuple[ListedEntity, int]]  # (entity, degree)
    total: int


def ranked(degree: np.ndarray, keys: np.ndarray, descending: bool) -> np.ndarray:
    """Positions by degree, ties by key: the same order whether or not a filter applies."""
    if not len(degree):
        return np.empty(0, dtype=np.int64)
    return np.lexsort((keys.astype(str), -degree if descending else degree))


# --- reads under the store's lock: fn(..., rows, graph) ---

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


# --- rankings, run in a worker thread (blocking) ---

def rank_matching(store: KnowledgeStore, keys: list[str], descending: bool, limit: int,
                  offset: int) -> tuple[list[tuple[EntityMeta, int]], int]:
    """One page of ``keys`` (a filter's matches) ranked by degree."""
    degrees = store.read_memory_sync(functools.partial(degrees_of, keys))
    order = ranked(np.asarray([degrees[k] for k in keys]), np.asarray(keys, dtype=object), descending)
    page = [keys[int(i)] for i in order[offset:offset + limit]]
    return store.read_memory_sync(functools.partial(metas, page, degrees)), len(keys)


def rank_all(store: KnowledgeStore, descending: bool, limit: int,
             offset: int) -> tuple[list[tuple[EntityMeta, int]], int]:
    """One page of the whole graph ranked by degree (the ranking itself outside the store's lock)."""
    names, degree = store.read_memory_sync(all_degrees)
    if not names:
        return [], 0
    order = ranked(degree, np.asarray(names, dtype=object), descending)[offset:offset + limit]
    keys = [names[int(i)] for i in order]
    page_degrees = dict(zip(keys, (int(degree[i]) for i in order), strict=True))
    return store.read_memory_sync(functools.partial(metas, keys, page_degrees)), len(names)
