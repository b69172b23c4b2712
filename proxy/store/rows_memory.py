"""What retrieval reads about entities, relations and chunks, kept in memory beside the graph.

DuckDB answers a point lookup in about a millisecond at best, and a retrieval needs a dozen of
them; so the small, hot metadata (names, types, descriptions, keywords, weights, source chunk ids,
vector keys, chunk-to-document names) lives here, loaded at start-up and changed with every commit
under the store's memory lock. Chunk texts stay in DuckDB and are read once per retrieval.

At a million chunks this is millions of Python objects, so it is kept lean: slotted records, and
every repeated string or tuple (a chunk id cited as a source, an entity key named by a relation,
a keyword list, a chunk's document names) is one shared object rather than a copy per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .tables_duckdb import Con

BATCH = 20_000  # rows fetched at a time: one big fetchall leaves its freed memory to the process


def fetch_rows(con: Con, query: str, args: list[Any] | None = None) -> Iterator[tuple[Any, ...]]:
    cursor = con.execute(query, args or [])
    while rows := cursor.fetchmany(BATCH):
        yield from rows


@dataclass(slots=True)  # treated as immutable: replaced whole, never changed in place
class EntityMeta:
    key: int
    name_key: str
    name: str
    type: str
    description: str
    source_ids: tuple[str, ...]


@dataclass(slots=True)  # treated as immutable: replaced whole, never changed in place
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
    # one object per distinct document-name tuple: a document's chunks all cite the same names
    _names: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict, repr=False)

    def load(self, con: Con) -> None:
        """Fill empty rows from the tables (start-up: millions of rows, so the loops are kept tight)."""
        chunk_keys, chunk_ids = self.chunk_keys, self.chunk_ids
        for chunk_id, key in fetch_rows(con, "SELECT id, key FROM chunks"):
            chunk_keys[chunk_id], chunk_ids[key] = key, chunk_id
        # chunks first, so that the source ids below are the chunk id strings already held, and
        # entities before relations, whose endpoints are then the entity keys already held
        key_of, id_of = chunk_keys.get, chunk_ids.get
        entities, entity_keys = self.entities, self.entity_keys
        types: dict[str, str] = {}  # a dozen distinct values over millions of rows
        for key, name_key, name, kind, description, sources in fetch_rows(
                con, "SELECT key, name_key, name, type, description, source_ids FROM entities"):
            entities[key] = EntityMeta(key, name_key, name_key if name == name_key else name,
                                       types.setdefault(kind, kind), description,
                                       tuple([id_of(key_of(c), c) for c in sources]))
            entity_keys[name_key] = key
        entity_of, vector_key_of = entities.get, entity_keys.get
        relations, relation_keys = self.relations, self.relation_keys
        keyword_lists: dict[tuple[str, ...], tuple[str, ...]] = {}  # only while loading: many repeat
        for key, pair, source, target, keywords, description, weight, sources in fetch_rows(
                con, "SELECT key, pair_key, source, target, keywords, description, weight, source_ids "
                "FROM relations"):
            keywords = tuple(keywords)
            ends = [entity_of(vector_key_of(source)), entity_of(vector_key_of(target))]
            relations[key] = RelationMeta(key, pair, ends[0].name_key if ends[0] else source,
                                          ends[1].name_key if ends[1] else target,
                                          keyword_lists.setdefault(keywords, keywords), description, float(weight),
                                          tuple([id_of(key_of(c), c) for c in sources]))
            relation_keys[pair] = key
        self.load_documents(con, None)

    def load_documents(self, con: Con, chunk_ids: list[str] | None) -> None:
        # plain pairs, grouped here: a GROUP BY over a million chunk ids costs DuckDB seconds
        query = "SELECT chunk_id, document_id FROM document_chunks"
        args: list[Any] = []
        if chunk_ids is not None:
            if not chunk_ids:
                return
            query += " WHERE chunk_id = ANY(?::VARCHAR[])"
            args = [chunk_ids]
            for chunk_id in chunk_ids:
                self.chunk_documents.pop(chunk_id, None)
        names = dict(con.execute("SELECT id, name FROM documents").fetchall())
        grouped: dict[str, Any] = {}
        for chunk_id, document_id in fetch_rows(con, query, args):
            name = names.get(document_id)
            if name is None:
                continue
            seen = grouped.get(chunk_id)
            if seen is None:
                grouped[chunk_id] = name            # most chunks belong to one document
            elif isinstance(seen, str):
                grouped[chunk_id] = {seen, name}
            else:
                seen.add(name)
        for chunk_id, found in grouped.items():
            names_tuple = (found,) if isinstance(found, str) else tuple(sorted(found))
            self.chunk_documents[self.chunk_id(chunk_id)] = self._names.setdefault(names_tuple, names_tuple)

    # --- sharing repeated strings ---

    def chunk_id(self, chunk_id: str) -> str:
        """The stored string for ``chunk_id`` (so that citing a chunk costs no new string)."""
        key = self.chunk_keys.get(chunk_id)
        return chunk_id if key is None else self.chunk_ids.get(key, chunk_id)

    def sources(self, chunk_ids: Any) -> tuple[str, ...]:
        return tuple(self.chunk_id(c) for c in chunk_ids)

    def entity_name_key(self, name_key: str) -> str:
        meta = self.entity(name_key)
        return name_key if meta is None else meta.name_key

    # --- changes ---

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

    # --- lookups ---

    def entity(self, name_key: str) -> EntityMeta | None:
        key = self.entity_keys.get(name_key)
        return None if key is None else self.entities.get(key)

    def relation(self, pair: str) -> RelationMeta | None:
        key = self.relation_keys.get(pair)
        return None if key is None else self.relations.get(key)
