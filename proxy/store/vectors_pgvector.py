"""A vector index that is pgvector's HNSW index on a PostgreSQL table (the PostgreSQL backend).

The vectors are the table's embedding column, written by the commit in the same transaction as
the rows, so there is nothing to add, remove, save or heal here: ``add`` and ``remove`` only keep the
count the store reads on the event loop, and ``generation`` is the tables'. Searches are one
statement each (0.8-2 ms at 100k rows with the round trip, recall 0.97-0.99 at ef_search 128:
docs/postgresql.md, measurements). For the f16 element type the index is on the embedding cast to ``halfvec``,
for i8 on its binary quantisation (pgvector has no 8-bit type: ``commit.vector_index_kind``), whose
nearest candidates are re-ranked by the full vectors; a search orders by the indexed expression, or
the planner would not use the index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg import sql

from proxy.store.postgres.connection import EF_SEARCH, EF_SEARCH_SESSION, Con, get_meta, vector_array
from proxy.store.postgres.tables import PgTables

NO_KEY = 0   # keys start at 1: pads the rows of ``search_many`` that found fewer than asked


class PgVectors:
    def __init__(self, tables: PgTables, table: str) -> None:
        self.tables = tables
        self.db = tables.db
        self.table = table
        self.generation = 0
        self._ndim: int | None = None
        self._kind = "vector"
        self._count = 0

    @property
    def ndim(self) -> int | None:
        return self._ndim

    def __len__(self) -> int:
        return self._count

    def load(self, ndim: int | None) -> bool:
        """The table's state: always there (the tables are the index). The count is the one of the
        snapshot the rows were loaded from, once they are (a shared store: ``KnowledgeStore`` loads
        the indexes again after the rows), so that the commits replayed from then on keep it exact."""
        self._count = self.tables.loaded_counts.get(self.table, self._read_state(ndim))
        return True

    def reset(self, ndim: int | None) -> None:
        """Rebuilt from the tables (``graphgate reindex``): the table's count now, not the one of the
        start-up snapshot (a re-embedding removes every community summary meanwhile)."""
        self._count = self._read_state(ndim)

    def _read_state(self, ndim: int | None) -> int:
        """The table's count now; the index's kind, generation and dimension taken on."""
        def read(con: Con) -> tuple[int, str, int]:
            row = con.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(self.table))).fetchone()
            return (int(row[0]) if row else 0, get_meta(con, "vector_index", "vector") or "vector",
                    int(get_meta(con, "generation", "0") or 0))

        count, self._kind, self.generation = self.db.read_sync(read)
        self._ndim = ndim
        return count

    def save(self, generation: int) -> None:
        self.generation = generation

    def keys(self) -> np.ndarray:
        rows = self.db.read_sync(lambda con: con.execute(
            sql.SQL("SELECT key FROM {}").format(sql.Identifier(self.table))).fetchall())
        return np.asarray([r[0] for r in rows], dtype=np.uint64)

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """The commit wrote them; a first commit also typed the column (its dimension, its index)."""
        self._count += len(keys)
        if self._ndim is None and len(keys):
            def read(con: Con) -> tuple[int, str]:
                return int(get_meta(con, "embed_dim", "0") or 0), get_meta(con, "vector_index", "vector") or "vector"
            ndim, self._kind = self.db.read_sync(read)
            self._ndim = ndim or None

    def remove(self, keys: np.ndarray) -> None:
        self._count = max(0, self._count - len(keys))

    def _order(self) -> sql.Composable:
        """The expression the HNSW index is on, compared with the query vector (parameter)."""
        if self._kind == "halfvec" and self._ndim:
            cast = sql.SQL("::halfvec({})").format(sql.Literal(self._ndim))
            return sql.SQL("embedding{} <=> %s{}").format(cast, cast)
        if self._kind == "bit" and self._ndim:
            return sql.SQL("binary_quantize(embedding)::bit({}) <~> binary_quantize(%s)").format(
                sql.Literal(self._ndim))
        return sql.SQL("embedding <=> %s")

    def _search(self, con: Con, vector: np.ndarray, count: int) -> list[tuple[Any, ...]]:
        query_vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        table = sql.Identifier(self.table)
        if self._kind != "bit":
            order = self._order()
            return con.execute(sql.SQL("SELECT key, 1 - ({}) FROM {} ORDER BY {} LIMIT %s").format(
                order, table, order), [query_vector, query_vector, count]).fetchall()
        # the binary index's nearest candidates (at least four per result), re-ranked by the full vectors
        candidates = max(EF_SEARCH, 4 * count)
        query = sql.SQL("SELECT key, 1 - (embedding <=> %s) AS similarity FROM (SELECT key, embedding FROM {} "
                        "ORDER BY {} LIMIT %s) candidates ORDER BY similarity DESC LIMIT %s").format(
            table, self._order())
        if candidates <= EF_SEARCH_SESSION:
            return con.execute(query, [query_vector, query_vector, candidates, count]).fetchall()
        with con.transaction():   # the index yields at most ef_search rows
            con.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(candidates)))
            return con.execute(query, [query_vector, query_vector, candidates, count]).fetchall()

    def search(self, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """(key, cosine similarity) pairs, best first."""
        if self._ndim is None or self._count == 0 or count <= 0:
            return []
        rows = self.db.read_sync(self._search, vector, count)
        return [(int(key), float(similarity)) for key, similarity in rows]

    def search_many(self, vectors: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and cosine similarities, one row per vector, best first (``count`` capped at the
        size; rows that found fewer are padded with key 0, similarity 0)."""
        count = min(count, self._count)
        keys = np.full((len(vectors), count), NO_KEY, dtype=np.uint64)
        similarities = np.zeros((len(vectors), count), dtype=np.float32)

        def search_all(con: Con) -> None:
            for row, vector in enumerate(vectors):
                for column, (key, similarity) in enumerate(self._search(con, vector, count)):
                    keys[row, column], similarities[row, column] = key, similarity

        if count > 0 and self._ndim is not None:
            self.db.read_sync(search_all)
        return keys, similarities

    def vectors(self, keys: np.ndarray) -> np.ndarray:
        """Stored vectors of ``keys`` as float32 unit rows; no rows at all when any key is missing."""
        wanted = [int(k) for k in np.asarray(keys, dtype=np.uint64)]
        empty = np.empty((0, self._ndim or 0), dtype=np.float32)
        if not wanted:
            return empty
        # binary results: a vector as text is 768 numbers to parse, 8x slower for the 160 a turn reads
        rows = self.db.read_sync(lambda con: con.execute(
            sql.SQL("SELECT key, embedding FROM {} WHERE key = ANY(%s)").format(sql.Identifier(self.table)),
            [wanted], binary=True).fetchall())
        found = {int(key): vector_array(vector) for key, vector in rows}
        if any(key not in found for key in wanted):
            return empty
        stacked = np.vstack([found[key] for key in wanted])
        norms = np.linalg.norm(stacked, axis=1, keepdims=True)
        return stacked / np.where(norms == 0, 1.0, norms)

    def similarities(self, keys: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Computed by the server: a turn weighs hundreds of relations by their cosine to the
        question, and their vectors would be 3 KB each on the wire."""
        wanted = [int(k) for k in np.asarray(keys, dtype=np.uint64)]
        if not wanted or self._ndim is None:
            return np.empty(0, dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        rows = self.db.read_sync(lambda con: con.execute(
            sql.SQL("SELECT key, 1 - (embedding <=> %s) FROM {} WHERE key = ANY(%s)").format(
                sql.Identifier(self.table)), [query, wanted], binary=True).fetchall())
        found = {int(key): float(similarity) for key, similarity in rows}
        if any(key not in found for key in wanted):
            return np.empty(0, dtype=np.float32)
        return np.asarray([found[key] for key in wanted], dtype=np.float32)
