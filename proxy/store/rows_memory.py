"""What retrieval reads about entities, relations and chunks, kept in memory beside the graph.

DuckDB answers a point lookup in about a millisecond at best, and a retrieval needs a dozen of
them; so the small, hot metadata (names, types, descriptions, keywords, weights, source chunk ids,
vector keys, chunk-to-document names) lives here, loaded at start-up and changed with every commit
under the store's memory lock. Chunk texts stay in DuckDB and are read once per retrieval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .tables_duckdb import Con


@dataclass(frozen=True)
class EntityMeta:
    key: int
    name_key: str
    name: str
    type: str
    description: str
    source_ids: tuple[str, ...]


@dataclass(frozen=True)
class RelationMeta:
    key: int
    pair: str
    source: str
    target: str
    keywords: tuple[str, ...]
    description: str
    weight: float
    source_ids: tuple[str, ...]


@dataclass
class MemoryRows:
    entities: dict[int, EntityMeta] = field(default_factory=dict)           # by vector key
    entity_keys: dict[str, int] = field(default_factory=dict)               # name_key -> vector key
    relations: dict[int, RelationMeta] = field(default_factory=dict)
    relation_keys: dict[str, int] = field(default_factory=dict)             # pair key -> vector key
    chunk_keys: dict[str, int] = field(default_factory=dict)                # chunk id -> vector key
    chunk_ids: dict[int, str] = field(default_factory=dict)                 # vector key -> chunk id
    chunk_documents: dict[str, tuple[str, ...]] = field(default_factory=dict)  # chunk id -> document names

    def load(self, con: Con) -> None:
        for key, name_key, name, kind, description, sources in con.execute(
                "SELECT key, name_key, name, type, description, source_ids FROM entities").fetchall():
            self.put_entity(EntityMeta(key, name_key, name, kind, description, tuple(sources)))
        for row in con.execute("SELECT key, pair_key, source, target, keywords, description, weight, source_ids "
                               "FROM relations").fetchall():
            self.put_relation(RelationMeta(row[0], row[1], row[2], row[3], tuple(row[4]), row[5], float(row[6]),
                                           tuple(row[7])))
        for chunk_id, key in con.execute("SELECT id, key FROM chunks").fetchall():
            self.chunk_keys[chunk_id], self.chunk_ids[key] = key, chunk_id
        self.load_documents(con, None)

    def load_documents(self, con: Con, chunk_ids: list[str] | None) -> None:
        query = ("SELECT dc.chunk_id, list(DISTINCT d.name ORDER BY d.name) FROM document_chunks dc "
                 "JOIN documents d ON d.id = dc.document_id")
        args: list[Any] = []
        if chunk_ids is not None:
            if not chunk_ids:
                return
            query += " WHERE dc.chunk_id = ANY(?::VARCHAR[])"
            args = [chunk_ids]
            for chunk_id in chunk_ids:
                self.chunk_documents.pop(chunk_id, None)
        for chunk_id, names in con.execute(query + " GROUP BY dc.chunk_id", args).fetchall():
            self.chunk_documents[chunk_id] = tuple(names)

    def put_entity(self, meta: EntityMeta) -> None:
        old = self.entity_keys.get(meta.name_key)
        if old is not None:
            self.entities.pop(old, None)
        self.entities[meta.key], self.entity_keys[meta.name_key] = meta, meta.key

    def drop_entity(self, name_key: str) -> None:
        key = self.entity_keys.pop(name_key, None)
        if key is not None:
            self.entities.pop(key, None)

    def put_relation(self, meta: RelationMeta) -> None:
        old = self.relation_keys.get(meta.pair)
        if old is not None:
            self.relations.pop(old, None)
        self.relations[meta.key], self.relation_keys[meta.pair] = meta, meta.key

    def drop_relation(self, pair: str) -> None:
        key = self.relation_keys.pop(pair, None)
        if key is not None:
            self.relations.pop(key, None)

    def put_chunk(self, chunk_id: str, key: int) -> None:
        self.chunk_keys[chunk_id], self.chunk_ids[key] = key, chunk_id

    def drop_chunk(self, chunk_id: str) -> None:
        key = self.chunk_keys.pop(chunk_id, None)
        if key is not None:
            self.chunk_ids.pop(key, None)
        self.chunk_documents.pop(chunk_id, None)

    def entity(self, name_key: str) -> EntityMeta | None:
        key = self.entity_keys.get(name_key)
        return None if key is None else self.entities.get(key)

    def relation(self, pair: str) -> RelationMeta | None:
        key = self.relation_keys.get(pair)
        return None if key is None else self.relations.get(key)
