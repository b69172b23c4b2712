"""What retrieval reads about entities, relations and chunks, kept in memory beside the graph.

DuckDB answers a point lookup in about a millisecond at best, and a retrieval needs a dozen of
them; so the small, hot metadata (names, types, keywords, weights, source chunk ids, vector keys,
chunk-to-document names) lives here, loaded at start-up and changed with every commit under the
store's memory lock. Texts stay in the tables: chunk contents and descriptions (often the largest
strings, up to a summary's length) are read for the few rows a retrieval or a page shows
(``descriptions``).

At a million chunks this is millions of Python objects, so it is kept lean: slotted records, a
relation's endpoints derived from its pair key, and every repeated value (a chunk id cited as a
source, an entity type, a keyword list, a weight, a chunk's document names) one shared object
rather than a copy per row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

# rows as the tables backend yields them (``proxy/store/duckdb/memory_load.py``)
ChunkKeyRow = tuple[str, int]                                  # id, vector key
EntityMetaRow = tuple[int, str, str, str, list[str]]           # key, name_key, name, type, source ids
RelationMetaRow = tuple[int, str, list[str], float, list[str]]  # key, pair key, keywords, weight, source ids
ChunkDocumentRow = tuple[str, str | None]                      # chunk id, document name



def _id_of(chunk_ids: dict[int, str]) -> Callable[[int | None, str], str]:
    """``chunk_ids.get``, taking the None that an unknown chunk's key lookup gives (it finds nothing,
    so the default comes back): the loops below stay one dict call per source."""
    return cast("Callable[[int | None, str], str]", chunk_ids.get)

@dataclass(slots=True)  # treated as immutable: replaced whole, never changed in place
class EntityMeta:
    key: int
    name_key: str
    name: str
    type: str
    source_ids: tuple[str, ...]


@dataclass(slots=True)  # treated as immutable: replaced whole, never changed in place
class RelationMeta:
    key: int
    pair: str            # "<source key>\x1f<target key>", endpoints sorted
    keywords: tuple[str, ...]
    weight: float
    source_ids: tuple[str, ...]

    # the endpoints are the pair's two halves: derived, not stored (two strings per relation less
    # to hold, and none to look up while a million relations load)
    @property
    def source(self) -> str:
        return self.pair.split("\x1f", 1)[0]

    @property
    def target(self) -> str:
        return self.pair.split("\x1f", 1)[1]


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

    def load(self, chunks: Iterable[ChunkKeyRow], entities_in_key_order: Iterable[EntityMetaRow],
             relations: Iterable[RelationMetaRow], chunk_documents: Iterable[ChunkDocumentRow]) -> None:
        """Fill empty rows from the tables (start-up: millions of rows, so the loops are kept tight).
        The iterables are consumed in order: chunks first, so that the source ids below are the
        chunk id strings already held; entities in key order, which the graph's vertices follow."""
        chunk_keys, chunk_ids = self.chunk_keys, self.chunk_ids
        for chunk_id, key in chunks:
            chunk_keys[chunk_id], chunk_ids[key] = key, chunk_id
        key_of, id_of = chunk_keys.get, _id_of(chunk_ids)
        entities, entity_keys = self.entities, self.entity_keys
        types: dict[str, str] = {}  # a dozen distinct values over millions of rows
        for key, name_key, name, kind, sources in entities_in_key_order:
            entities[key] = EntityMeta(key, name_key, name_key if name == name_key else name,
                                       types.setdefault(kind, kind), tuple([id_of(key_of(c), c) for c in sources]))
            entity_keys[name_key] = key
        relations_by_key, relation_keys = self.relations, self.relation_keys
        keyword_lists: dict[tuple[str, ...], tuple[str, ...]] = {}  # only while loading: many repeat
        weights: dict[float, float] = {}  # likewise: sums of small whole numbers, mostly
        for key, pair, keyword_list, weight, sources in relations:
            keywords = tuple(keyword_list)
            relations_by_key[key] = RelationMeta(key, pair, keyword_lists.setdefault(keywords, keywords),
                                                 weights.setdefault(weight, weight),
                                                 tuple([id_of(key_of(c), c) for c in sources]))
            relation_keys[pair] = key
        self.load_documents(chunk_documents, None)

    def load_documents(self, pairs: Iterable[ChunkDocumentRow], chunk_ids: list[str] | None) -> None:
        """Which documents cite each chunk: ``pairs`` for all of them (start-up, ``chunk_ids`` None),
        or for the chunks ``chunk_ids`` (after a commit: only their links are read)."""
        shared = self._names
        if chunk_ids is not None:
            for chunk_id in chunk_ids:
                self.chunk_documents.pop(chunk_id, None)
        key_of, id_of = self.chunk_keys.get, _id_of(self.chunk_ids)
        documents = self.chunk_documents
        for chunk_id, name in pairs:
            if name is None:
                continue
            chunk_id = id_of(key_of(chunk_id), chunk_id)
            seen = documents.get(chunk_id)
            if seen is None:  # most chunks belong to one document
                documents[chunk_id] = shared.setdefault((name,), (name,))
            elif name not in seen:
                both = tuple(sorted((*seen, name)))
                documents[chunk_id] = shared.setdefault(both, both)

    # --- sharing repeated strings ---

    def chunk_id(self, chunk_id: str) -> str:
        """The stored string for ``chunk_id`` (so that citing a chunk costs no new string)."""
        key = self.chunk_keys.get(chunk_id)
        return chunk_id if key is None else self.chunk_ids.get(key, chunk_id)

    def sources(self, chunk_ids: Any) -> tuple[str, ...]:
        return tuple(self.chunk_id(c) for c in chunk_ids)

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

    def name_of(self, name_key: str) -> str:
        """An entity's name (its key if it is gone)."""
        entity = self.entity(name_key)
        return entity.name if entity is not None else name_key

    def relation(self, pair: str) -> RelationMeta | None:
        key = self.relation_keys.get(pair)
        return None if key is None else self.relations.get(key)

