"""Re-embedding in DuckDB: new vectors staged through an Arrow table, and the swap's bookkeeping
(the rest is written once, proxy/store/sql_reembed.py)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa

from proxy.store.duckdb.commit import vectors_column
from proxy.store.duckdb.connection import Database, bump_generation, set_meta
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_dialect import Sql
from proxy.store.sql_reembed import SqlReembed


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


class DuckDBReembed(SqlReembed):
    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db

    def after_swap(self, con: Any, dim: int) -> None:
        set_meta(con, "embed_dim", dim)   # the vector indexes are rebuilt from the tables afterwards

    def swapped(self, con: Any) -> None:
        bump_generation(con)
