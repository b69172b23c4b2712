"""Lookups in the three engines for one query (all blocking: run in a worker thread).

Vector searches return keys and similarities; rows come from DuckDB by key; degrees and
neighbourhoods come from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from proxy.store.store import KnowledgeStore
from proxy.store.rows_memory import EntityMeta, RelationMeta
from proxy.store.duckdb.memory_load import descriptions
from proxy.store.duckdb.connection import Con


@dataclass
class FoundEntity:
    key: str
    name: str
    type: str
    source_ids: list[str]
    vector_key: int
    description: str = ""  # read for the candidates only, once they are chosen (``fill_descriptions``)
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
    weight: float
    source_ids: list[str]
    vector_key: int
    description: str = ""
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


def _entity(meta: EntityMeta) -> FoundEntity:
    return FoundEntity(meta.name_key, meta.name, meta.type, list(meta.source_ids), meta.key)


def _relation(store: KnowledgeStore, meta: RelationMeta) -> FoundRelation:
    names = [(store.rows.entity(k) or EntityMeta(0, k, k, "", ())).name for k in (meta.source, meta.target)]
    return FoundRelation(meta.pair, meta.source, meta.target, names[0], names[1], list(meta.keywords),
                         meta.weight, list(meta.source_ids), meta.key)


def fill_descriptions(con: Con, entities: list[FoundEntity], relations: list[FoundRelation]) -> None:
    """Read the descriptions of the chosen entities and relations (two indexed reads)."""
    text = descriptions(con, "entities", [(e.vector_key, e.key) for e in entities])
    for entity in entities:
        entity.description = text.get(entity.vector_key, "")
    text = descriptions(con, "relations", [(r.vector_key, r.pair) for r in relations])
    for relation in relations:
        relation.description = text.get(relation.vector_key, "")


def entities_by_keys(store: KnowledgeStore, keys: list[int]) -> dict[int, FoundEntity]:
    with store.memory_lock:
        return {k: _entity(store.rows.entities[k]) for k in keys if k in store.rows.entities}


def entities_by_name(store: KnowledgeStore, names: list[str]) -> dict[str, FoundEntity]:
    with store.memory_lock:
        found = {n: store.rows.entity(n) for n in names}
        return {n: _entity(m) for n, m in found.items() if m is not None}


def relations_by_keys(store: KnowledgeStore, keys: list[int]) -> dict[int, FoundRelation]:
    with store.memory_lock:
        return {k: _relation(store, store.rows.relations[k]) for k in keys if k in store.rows.relations}


def relations_by_pairs(store: KnowledgeStore, pairs: list[str]) -> dict[str, FoundRelation]:
    with store.memory_lock:
        found = {p: store.rows.relation(p) for p in pairs}
        return {p: _relation(store, m) for p, m in found.items() if m is not None}


def chunk_keys(store: KnowledgeStore, ids: list[str]) -> dict[str, int]:
    with store.memory_lock:
        return {i: store.rows.chunk_keys[i] for i in ids if i in store.rows.chunk_keys}


def chunk_ids(store: KnowledgeStore, keys: list[int]) -> dict[int, str]:
    with store.memory_lock:
        return {k: store.rows.chunk_ids[k] for k in keys if k in store.rows.chunk_ids}


def chunk_texts(con: Con, keys: list[int]) -> dict[str, tuple[str, int]]:
    """id -> (content, tokens) of the chunks with these vector keys: the one DuckDB read of a
    retrieval. By key, through the key index: matching ids would scan every chunk id (16 ms at 1M)."""
    if not keys:
        return {}
    rows = con.execute("SELECT id, content, tokens FROM chunks WHERE key IN (SELECT unnest(?::BIGINT[]))",
                       [keys]).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def documents_of(store: KnowledgeStore, ids: list[str]) -> dict[str, list[str]]:
    with store.memory_lock:
        return {i: list(store.rows.chunk_documents.get(i, ())) for i in ids}


def degrees(store: KnowledgeStore, keys: list[str]) -> dict[str, int]:
    with store.memory_lock:
        return store.graph.degrees(keys)


def incident_pairs(store: KnowledgeStore, keys: list[str]) -> list[str]:
    """Pair keys of every edge touching ``keys``, in the order of ``keys``."""
    from proxy.store.changes import pair_key

    pairs: dict[str, None] = {}
    with store.memory_lock:
        for key in keys:
            for neighbour in store.graph.neighbourhood(key, 1):
                if neighbour != key:
                    pairs[pair_key(key, neighbour)] = None
    return list(pairs)


def chunk_vectors(store: KnowledgeStore, keys: list[int]) -> np.ndarray:
    with store.memory_lock:
        if store.indexes["chunks"].index is None or not keys:
            return np.empty((0, 0), dtype=np.float32)
        return store.indexes["chunks"].vectors(np.asarray(keys, dtype=np.uint64))
