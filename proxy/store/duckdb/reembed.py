"""Re-embedding in DuckDB: the recorded models, the staging of new vectors through an Arrow table,
and the swap (the rest is written once, proxy/store/sql_reembed.py)."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

from proxy.store.duckdb.commit import vectors_column
from proxy.store.duckdb.connection import Database, bump_generation, get_meta, set_meta
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_dialect import Sql
from proxy.store.sql_reembed import ID, SqlReembed, all_staged
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, TableModel, dim_key, model_key, read_models


def models(sql: Sql) -> dict[str, TableModel]:
    return read_models(lambda key: get_meta(sql.con, key))


def discard_staged(sql: Sql, keep: str | None, dim: int | None) -> int:
    where, params = "", list[str | int]()
    if keep is not None:
        where, params = "WHERE model <> ?", [keep]
        if dim is not None:
            where, params = "WHERE model <> ? OR len(embedding) <> ?", [keep, dim]
    return len(sql.execute(f"DELETE FROM reembedding {where} RETURNING 1", params).fetchall())


def stage(sql: Sql, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
          hashes: list[str] | None) -> None:
    frame = pa.table({"tbl": [table] * len(rows), "id": [r.id for r in rows], "model": [model] * len(rows),
                      "source": [r.source for r in rows],
                      "embed_hash": pa.array(hashes if hashes is not None else [None] * len(rows), pa.string()),
                      "embedding": vectors_column(list(vectors))})
    sql.con.register("staged", frame)
    try:
        sql.execute("INSERT OR REPLACE INTO reembedding SELECT * FROM staged")
    finally:
        sql.con.unregister("staged")


def swap(sql: Sql, model: str, dim: int) -> bool:
    if not all_staged(sql, model):
        return False
    for table in REEMBEDDED:
        hashed = ", embed_hash = r.embed_hash" if table != "chunks" else ""
        # each vector under a new key (the indexes are rebuilt from the tables afterwards)
        sql.execute(f"""UPDATE {table} SET key = nextval('vector_keys'), embedding = r.embedding{hashed}
                        FROM reembedding r WHERE r.tbl = ? AND r.id = {table}.{ID[table]} AND r.model = ?""",
                    [table, model])
    sql.execute("DELETE FROM communities")
    sql.execute("DELETE FROM reembedding")
    for table in VECTOR_TABLES:
        set_meta(sql.con, model_key(table), model)
        set_meta(sql.con, dim_key(table), dim)
    set_meta(sql.con, "embed_model", model)
    set_meta(sql.con, "embed_dim", dim)
    bump_generation(sql.con)
    return True


class DuckDBReembed(SqlReembed):
    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db
