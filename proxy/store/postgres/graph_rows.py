"""The graph's tables in PostgreSQL: the rows' embeddings as one matrix, read in binary (the rest is
written once, proxy/store/sql_graph_rows.py)."""

from __future__ import annotations

import sys

import numpy as np

from proxy.store.postgres.connection import PgDatabase, vector_array
from proxy.store.protocols.graph_rows import Subject
from proxy.store.sql_dialect import Sql
from proxy.store.sql_graph_rows import SqlGraphRows
from proxy.store.sql_retrieval_rows import ID_COLUMN


def embeddings_by(sql: Sql, table: Subject, keys: list[str]) -> np.ndarray:
    """The rows' embeddings as one matrix, in the order of the sorted keys (binary: no text floats)."""
    id_column = ID_COLUMN[table]   # the table's name is one of two, never a caller's text
    with sql.con.cursor(binary=True) as cursor:
        statement = (f'SELECT embedding FROM {table} WHERE {sql.among(id_column, "text")} '
                     f'ORDER BY {id_column} COLLATE "C"')
        rows = cursor.execute(sql.dialect.statement(statement), [list(keys)]).fetchall()
    if not rows:
        return np.empty((0, 0), dtype=np.float32)
    return np.vstack([vector_array(r[0]) for r in rows]).astype(np.float32, copy=False)


class PgGraphRows(SqlGraphRows):
    """``GraphRows`` (proxy/store/protocols/graph_rows.py) over one PostgreSQL schema."""

    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db
