"""Lookups in the three engines for one query (all blocking: run in a worker thread).

Vector searches return keys and similarities; rows come from DuckDB by key; degrees and
neighbourhoods come from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..store.knowledge import KnowledgeStore
from ..store.tables_duckdb import Con


@dataclass
class FoundEntity:
    key: str
    name: str
    type: str
    description: str
    source_ids: list[str]
    score: float = 0.0
    degree: int = 0


@dataclass
class FoundRelation:
    pair: str
    source: str          # entity keys
    target: str
    source_name: str
    target_name: str
    keywords: list[str]
    description: str
    weight: float
    source_ids: list[str]
    score: float = 0.0
    degree: int = 0      # degree(source) + degree(target): how central the edge is


@dataclass
class FoundChunk:
    id: str
    content: str
    tokens: int
    score: float = 0.0
    origin: str = "vector"           # vector | entity | relation
    documents: list[str] = field(default_factory=list)


def vector_search(store: KnowledgeStore, table: str, vector: np.ndarray, count: int,
                  threshold: float) -> list[tuple[int, float]]:
    with store.memory_lock:
        matches = store.indexes[table].search(vector, count)
    return [(key, score) for key, score in matches if score >= threshold]


def entities_by_keys(con: Con, keys: list[int]) -> dict[int, FoundEntity]:
    if not keys:
        return {}
    rows = con.execute("SELECT key, name_key, name, type, description, source_ids FROM entities "
                       "WHERE key = ANY(?::BIGINT[])", [keys]).fetchall()
    return {r[0]: FoundEntity(r[1], r[2], r[3], r[4], list(r[5])) for r in rows}


def entities_by_name(con: Con, names: list[str]) -> dict[str, FoundEntity]:
    if not names:
        return {}
    rows = con.execute("SELECT name_key, name, type, description, source_ids FROM entities "
                       "WHERE name_key = ANY(?::VARCHAR[])", [names]).fetchall()
    return {r[0]: FoundEntity(r[0], r[1], r[2], r[3], list(r[4])) for r in rows}


_RELATION_SELECT = """SELECT {id}, pair_key, source, target, keywords, description, weight, source_ids
                      FROM relations WHERE {id} = ANY(?)"""


def _relations(con: Con, id_column: str, ids: list[Any]) -> dict[Any, FoundRelation]:
    """Relations with their endpoints' display names (two index lookups, no join over entities)."""
    if not ids:
        return {}
    rows = con.execute(_RELATION_SELECT.format(id=id_column), [ids]).fetchall()
    endpoints = list({k for r in rows for k in (r[2], r[3])})
    names = dict(con.execute("SELECT name_key, name FROM entities WHERE name_key = ANY(?::VARCHAR[])",
                             [endpoints]).fetchall()) if rows else {}
    return {r[0]: FoundRelation(r[1], r[2], r[3], names.get(r[2], r[2]), names.get(r[3], r[3]), list(r[4]), r[5],
                                float(r[6]), list(r[7])) for r in rows}


def relations_by_keys(con: Con, keys: list[int]) -> dict[int, FoundRelation]:
    return _relations(con, "key", keys)


def relations_by_pairs(con: Con, pairs: list[str]) -> dict[str, FoundRelation]:
    return _relations(con, "pair_key", pairs)


def chunk_keys(con: Con, ids: list[str]) -> dict[str, int]:
    """id -> vector key."""
    if not ids:
        return {}
    return dict(con.execute("SELECT id, key FROM chunks WHERE id = ANY(?::VARCHAR[])", [ids]).fetchall())


def chunks_by_ids(con: Con, ids: list[str]) -> dict[str, tuple[int, str, int]]:
    """id -> (vector key, content, tokens)."""
    if not ids:
        return {}
    rows = con.execute("SELECT id, key, content, tokens FROM chunks WHERE id = ANY(?::VARCHAR[])",
                       [ids]).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def chunks_by_keys(con: Con, keys: list[int]) -> dict[int, tuple[str, str, int]]:
    """vector key -> (id, content, tokens)."""
    if not keys:
        return {}
    rows = con.execute("SELECT key, id, content, tokens FROM chunks WHERE key = ANY(?::BIGINT[])",
                       [keys]).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def documents_of(con: Con, chunk_ids: list[str]) -> dict[str, list[str]]:
    """chunk id -> names of the documents containing it (oldest first)."""
    if not chunk_ids:
        return {}
    rows = con.execute("""SELECT dc.chunk_id, list(d.name ORDER BY d.created_at) FROM document_chunks dc
                          JOIN documents d ON d.id = dc.document_id
                          WHERE dc.chunk_id = ANY(?::VARCHAR[]) GROUP BY dc.chunk_id""",
                       [chunk_ids]).fetchall()
    return {r[0]: list(dict.fromkeys(r[1])) for r in rows}


def degrees(store: KnowledgeStore, keys: list[str]) -> dict[str, int]:
    with store.memory_lock:
        return {key: store.graph.degree(key) for key in keys}


def incident_pairs(store: KnowledgeStore, keys: list[str]) -> list[str]:
    """Pair keys of every edge touching ``keys``, in the order of ``keys``."""
    from ..store.changes import pair_key

    pairs: dict[str, None] = {}
    with store.memory_lock:
        for key in keys:
            for neighbour in store.graph.neighbourhood(key, 1):
                if neighbour != key:
                    pairs[pair_key(key, neighbour)] = None
    return list(pairs)


def chunk_vectors(store: KnowledgeStore, keys: list[int]) -> np.ndarray:
    with store.memory_lock:
        index = store.indexes["chunks"].index
        if index is None or not keys:
            return np.empty((0, 0), dtype=np.float32)
        return np.asarray(index.get(np.asarray(keys, dtype=np.uint64)), dtype=np.float32)
