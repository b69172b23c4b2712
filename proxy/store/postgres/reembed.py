"""Re-embedding in PostgreSQL (``ReembedTables``, proxy/store/protocols/reembed.py): each vector
table's recorded model, the rows still to embed, their new vectors staged, and all of them swapped
in at once.

The embedding columns are typed ``vector(dim)`` and carry HNSW indexes once the dimension is known.
A new model's vectors may have another dimension, and updating every row through an HNSW index is
slower than building it again: the swap drops the vector indexes and leaves the columns untyped,
writes the new vectors, then types the columns with the new dimension and builds the indexes again
(``type_embeddings``, as the first commit does), all in its one transaction. The other replicas
reload their rows and graph (the change log's ``reload``).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from psycopg.sql import SQL, Identifier

from proxy.store.clock import now
from proxy.store.postgres.commit import VECTOR_TABLES, log_change, type_embeddings
from proxy.store.postgres.connection import Con, PgDatabase, bump_generation
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_dialect import Sql
from proxy.store.sql_reembed import SqlReembed

VECTOR_INDEX_METHODS = ["hnsw", "ivfflat"]


def stage(sql: Sql, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
          hashes: list[str] | None) -> None:
    sql.execute("""INSERT INTO reembedding (tbl, id, model, source, embed_hash, embedding)
                   SELECT ?, v.id, ?, v.source, v.hash, v.embedding
                   FROM unnest(?::text[], ?::text[], ?::text[], ?::vector[]) AS v(id, source, hash, embedding)
                   ON CONFLICT (tbl, id) DO UPDATE SET model = excluded.model, source = excluded.source,
                       embed_hash = excluded.embed_hash, embedding = excluded.embedding""",
                [table, model, [r.id for r in rows], [r.source for r in rows],
                 hashes if hashes is not None else [None] * len(rows),
                 [np.asarray(v, dtype=np.float32) for v in vectors]])


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
        con.execute(SQL("DROP INDEX {}").format(Identifier(index)))
    for table, dim in typed_dimensions(con).items():
        if dim is not None:
            con.execute(SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector").format(Identifier(table)))


class PgReembed(SqlReembed):
    """``dtype`` (the store's vector element type) decides the kind of vector index built again once
    the new model's vectors are swapped in."""

    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase, dtype: str) -> None:
        super().__init__(db)
        self.db: PgDatabase = db
        self.dtype = dtype

    def before_swap(self, con: Any) -> None:
        untype_embeddings(con)   # vectors of any dimension can be written

    def after_swap(self, con: Any, dim: int) -> None:
        type_embeddings(con, dim, self.dtype)   # the new dimension, and the vector indexes built again

    def swapped(self, con: Any) -> None:
        # every vector changed key: the other replicas reload rather than replay (proxy/store/store.py)
        log_change(con, bump_generation(con), {"reload": True}, now())
