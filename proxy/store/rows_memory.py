"""What retrieval reads about entities, relations and chunks, kept in memory beside the graph.

DuckDB answers a point lookup in about a millisecond at best, and a retrieval needs a dozen of
them; so the small, hot metadata (names, types, keywords, weights, source chunk ids, vector keys,
chunk-to-document names) lives here, loaded at start-up and changed with every commit under the
store's memory lock. Texts stay in DuckDB: chunk contents and descriptions (often the largest
strings, up to a summary's length) are read for the few rows a retrieval or a page shows
(``descriptions``).

At a million chunks this is millions of Python objects, so it is kept lean: slotted records, a
relation's endpoints derived from its pair key, and every repeated value (a chunk id cited as a
source, an entity type, a keyword list, a weight, a chunk's document names) one shared object
rather than a copy per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proxy.store.duckdb.connection import Con, relation_ready

BATCH = 20_000  # rows converted at a time: one big fetchall leaves its freed memory to the process


def fetch_rows(con: Con, query: str, args: list[Any] | None = None) -> Iterator[tuple[Any, ...]]:
    """The query's rows as tuples, converted a batch at a time column by column through Arrow
    (2-3x faster than DuckDB's row-wise fetch for millions of rows)."""
    for batch in relation_ready(con).sql(query, params=args or None).to_arrow_reader(BATCH):
        yield from zip(*[column.to_pylist() for column in batch.columns], strict=True)


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

    def load(self, con: Con) -> None:
        """Fill empty rows from the tables (start-up: millions of rows, so the loops are kept tight)."""
        chunk_keys, chunk_ids = self.chunk_keys, self.chunk_ids
        for chunk_id, key in fetch_rows(con, "SELECT id, key FROM chunks"):
            chunk_keys[chunk_id], chunk_ids[key] = key, chunk_id
        # chunks first, so that the source ids below are the chunk id strings already held; entities
        # in key order, which the graph's vertices follow (``graph_edges``)
        key_of, id_of = chunk_keys.get, chunk_ids.get
        entities, entity_keys = self.entities, self.entity_keys
        types: dict[str, str] = {}  # a dozen distinct values over millions of rows
        for key, name_key, name, kind, sources in fetch_rows(
                con, "SELECT key, name_key, name, type, source_ids FROM entities ORDER BY key"):
            entities[key] = EntityMeta(key, name_key, name_key if name == name_key else name,
                                       types.setdefault(kind, kind), tuple([id_of(key_of(c), c) for c in sources]))
            entity_keys[name_key] = key
        relations, relation_keys = self.relations, self.relation_keys
        keyword_lists: dict[tuple[str, ...], tuple[str, ...]] = {}  # only while loading: many repeat
        weights: dict[float, float] = {}  # likewise: sums of small whole numbers, mostly
        for key, pair, keywords, weight, sources in fetch_rows(
                con, "SELECT key, pair_key, keywords, weight, source_ids FROM relations"):
            keywords = tuple(keywords)
            relations[key] = RelationMeta(key, pair, keyword_lists.setdefault(keywords, keywords),
                                          weights.setdefault(weight, weight),
                                          tuple([id_of(key_of(c), c) for c in sources]))
            relation_keys[pair] = key
        self.load_documents(con, None)

    def load_documents(self, con: Con, chunk_ids: list[str] | None) -> None:
        """Which documents cite each chunk: all of them (start-up), or those of ``chunk_ids`` (after
        a commit: only their links are read, never the whole documents table)."""
        shared = self._names
        if chunk_ids is None:
            # plain pairs, grouped here: a GROUP BY over a million chunk ids costs DuckDB seconds
            names = {}
            for document_id, name in con.execute("SELECT id, name FROM documents").fetchall():
                names[document_id] = name
            pairs: Iterator[tuple[str, str | None]] = (
                (chunk_id, names.get(document_id))
                for chunk_id, document_id in fetch_rows(con, "SELECT chunk_id, document_id FROM document_chunks"))
        else:
            if not chunk_ids:
                return
            for chunk_id in chunk_ids:
                self.chunk_documents.pop(chunk_id, None)
            pairs = iter(con.execute("SELECT dc.chunk_id, d.name FROM document_chunks dc JOIN documents d "
                                     "ON d.id = dc.document_id WHERE dc.chunk_id = ANY(?::VARCHAR[])",
                                     [chunk_ids]).fetchall())
        key_of, id_of = self.chunk_keys.get, self.chunk_ids.get
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

    def relation(self, pair: str) -> RelationMeta | None:
        key = self.relation_keys.get(pair)
        return None if key is None else self.relations.get(key)


def descriptions(con: Con, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
    """Descriptions of entities or relations, by vector key (through the key index), for
    ``wanted`` (vector key, name or pair key) pairs. A row re-embedded (so re-keyed) by a commit since
    its key was read is found again by its name or pair."""
    if not wanted:
        return {}
    id_column = {"entities": "name_key", "relations": "pair_key"}[table]
    found = dict(con.execute(f"SELECT key, description FROM {table} WHERE key IN (SELECT unnest(?::BIGINT[]))",
                             [[key for key, _ in wanted]]).fetchall())
    missing = {name: key for key, name in wanted if key not in found}
    if missing:
        for name, description in con.execute(f"SELECT {id_column}, description FROM {table} "
                                             f"WHERE {id_column} IN (SELECT unnest(?::VARCHAR[]))",
                                             [list(missing)]).fetchall():
            found[missing[name]] = description
    return found


def graph_edges(con: Con) -> tuple[np.ndarray, list[float]]:
    """Every relation as a pair of vertex numbers (entities numbered in key order, as ``load``
    reads them) and its weight: the join runs in DuckDB, not over a million Python strings."""
    result = con.execute("""
        WITH vertex AS (SELECT name_key, row_number() OVER (ORDER BY key) - 1 AS i FROM entities)
        SELECT s.i AS s, t.i AS t, r.weight FROM relations r
        JOIN vertex s ON s.name_key = r.source JOIN vertex t ON t.name_key = r.target""").fetchnumpy()
    ends = np.stack([np.asarray(result["s"], dtype=np.int64), np.asarray(result["t"], dtype=np.int64)], axis=1)
    shared: dict[float, float] = {}  # few distinct weights: one float object each, not one per edge
    return ends, [shared.setdefault(w, w) for w in np.asarray(result["weight"], dtype=np.float64).tolist()]
