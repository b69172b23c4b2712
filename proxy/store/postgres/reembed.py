"""Re-embedding in PostgreSQL (``ReembedTables``): the texts to embed again, their new vectors, the
model recorded.

The embedding columns are typed ``vector(dim)`` and carry HNSW indexes once the dimension is known.
A new model's vectors may have another dimension, and updating every row through an HNSW index is
slower than building it again: the first batch of new vectors drops the vector indexes and leaves
the columns untyped (as before the first commit), and recording the model types them with the new
dimension and builds the indexes again (``type_embeddings``, as the first commit does).
"""

from __future__ import annotations

import numpy as np
from psycopg import sql

from proxy.store.clock import now
from proxy.store.postgres.commit import VECTOR_TABLES, log_change, type_embeddings
from proxy.store.postgres.connection import Con, PgDatabase, bump_generation, get_meta, next_keys, set_meta

_ID = {"chunks": "id", "entities": "name_key", "relations": "pair_key"}
VECTOR_INDEX_METHODS = ["hnsw", "ivfflat"]


def chunk_texts(con: Con) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute('SELECT id, content FROM chunks ORDER BY id COLLATE "C"').fetchall()]


def entity_texts(con: Con) -> list[tuple[str, str, str]]:
    return [(r[0], r[1], r[2]) for r in con.execute(
        'SELECT name_key, name, description FROM entities ORDER BY name_key COLLATE "C"').fetchall()]


def relation_texts(con: Con) -> list[tuple[str, list[str], str, str, str]]:
    rows = con.execute("""SELECT r.pair_key, r.keywords, coalesce(s.name, r.source), coalesce(t.name, r.target),
                                 r.description
                          FROM relations r LEFT JOIN entities s ON s.name_key = r.source
                          LEFT JOIN entities t ON t.name_key = r.target ORDER BY r.pair_key COLLATE "C" """).fetchall()
    return [(r[0], list(r[1]), r[2], r[3], r[4]) for r in rows]


def typed_dimensions(con: Con) -> dict[str, int | None]:
    """Each vector table's embedding dimension as typed (None: untyped ``vector``)."""
    rows = con.execute("""SELECT c.relname, a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                          WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s::text[])
                            AND a.attname = 'embedding'""", [list(VECTOR_TABLES)]).fetchall()
    return {name: (modifier if modifier > 0 else None) for name, modifier in rows}


def vector_indexes(con: Con) -> list[str]:
    """Names of the vector (HNSW or IVFFlat) indexes on the vector tables."""
    return [r[0] for r in con.execute(
        """SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_class t ON t.oid = x.indrelid JOIN pg_am am ON am.oid = i.relam
           WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%s::text[])
             AND am.amname = ANY(%s::text[]) ORDER BY 1""",
        [list(VECTOR_TABLES), VECTOR_INDEX_METHODS]).fetchall()]


def untype_embeddings(con: Con) -> None:
    """Drop the vector indexes and leave every embedding column untyped, so that vectors of any
    dimension can be written (re-embedding with another model)."""
    for index in vector_indexes(con):
        con.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index)))
    for table, dim in typed_dimensions(con).items():
        if dim is not None:
            con.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector").format(sql.Identifier(table)))


def store_vectors(con: Con, table: str, ids: list[str], vectors: np.ndarray, hashes: list[str] | None) -> None:
    if len(ids) != len(vectors) or (hashes is not None and len(hashes) != len(ids)):
        raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
    if not ids:
        return
    if vector_indexes(con) or any(dim is not None for dim in typed_dimensions(con).values()):
        untype_embeddings(con)   # the first batch of a re-embedding: indexes rebuilt by record_model
    keys = next_keys(con, len(ids))
    rows = [np.asarray(vector, dtype=np.float32) for vector in vectors]
    id_column = sql.Identifier(_ID[table])
    if hashes is None:
        con.execute(sql.SQL("UPDATE {table} AS t SET key = v.key, embedding = v.embedding "
                            "FROM unnest(%s::text[], %s::bigint[], %s::vector[]) AS v(id, key, embedding) "
                            "WHERE t.{id} = v.id").format(table=sql.Identifier(table), id=id_column),
                    [list(ids), keys, rows])
    else:
        con.execute(sql.SQL("UPDATE {table} AS t SET key = v.key, embedding = v.embedding, embed_hash = v.hash "
                            "FROM unnest(%s::text[], %s::bigint[], %s::vector[], %s::text[]) "
                            "AS v(id, key, embedding, hash) WHERE t.{id} = v.id").format(
                                table=sql.Identifier(table), id=id_column),
                    [list(ids), keys, rows, list(hashes)])


def record_model(con: Con, model: str, dim: int | None, dtype: str) -> None:
    if dim:
        if (any(typed != dim for typed in typed_dimensions(con).values())
                or len(vector_indexes(con)) < len(VECTOR_TABLES)):
            type_embeddings(con, dim, dtype)   # the columns store_vectors untyped, at the new model's dimension
        set_meta(con, "embed_dim", dim)
    set_meta(con, "embed_model", model)
    # every vector changed key: the other replicas reload rather than replay (proxy/store/store.py)
    log_change(con, bump_generation(con), {"reload": True}, now())


class PgReembed:
    """``ReembedTables`` over PostgreSQL. ``dtype`` (the store's vector element type) decides the
    kind of vector index built again once the new model's vectors are all written."""

    def __init__(self, db: PgDatabase, dtype: str) -> None:
        self.db = db
        self.dtype = dtype

    async def chunk_texts(self) -> list[tuple[str, str]]:
        return await self.db.read(chunk_texts)

    async def entity_texts(self) -> list[tuple[str, str, str]]:
        return await self.db.read(entity_texts)

    async def relation_texts(self) -> list[tuple[str, list[str], str, str, str]]:
        return await self.db.read(relation_texts)

    async def store_vectors(self, table: str, ids: list[str], vectors: np.ndarray,
                            hashes: list[str] | None) -> None:
        if table not in _ID:
            raise ValueError(f"no vectors in table {table}")
        await self.db.write(store_vectors, table, ids, vectors, hashes)

    async def record_model(self, model: str, dim: int | None) -> None:
        await self.db.write(record_model, model, dim, self.dtype)

    async def recorded_model(self) -> str | None:
        return await self.db.read(get_meta, "embed_model")
