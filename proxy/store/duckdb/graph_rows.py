"""The graph's tables in DuckDB: the rows' embeddings as one matrix, through Arrow (the rest is
written once, proxy/store/sql_graph_rows.py)."""

from __future__ import annotations

import sys

import numpy as np

from proxy.store.duckdb.connection import Database, relation_ready
from proxy.store.protocols.graph_rows import Subject
from proxy.store.sql_dialect import Sql
from proxy.store.sql_graph_rows import SqlGraphRows
from proxy.store.sql_retrieval_rows import ID_COLUMN


def embeddings_by(sql: Sql, table: Subject, keys: list[str]) -> np.ndarray:
    """The rows' embeddings as one matrix, in the order of the sorted keys, through Arrow (lists of
    floats via Python are slow)."""
    id_column = ID_COLUMN[table]
    rel = relation_ready(sql.con).sql(f"SELECT embedding FROM {table} WHERE {id_column} IN "
                                      f"(SELECT unnest($keys::VARCHAR[])) ORDER BY {id_column}", params={"keys": keys})
    column = rel.to_arrow_table().column("embedding").combine_chunks()
    if len(column) == 0:
        return np.empty((0, 0), dtype=np.float32)
    return np.asarray(column.values, dtype=np.float32).reshape(len(column), -1)


class DuckDBGraphRows(SqlGraphRows):
    """``GraphRows`` (proxy/store/protocols/graph_rows.py) over one DuckDB database."""

    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db
