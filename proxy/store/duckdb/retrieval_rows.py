"""The DuckDB side of ``RetrievalRows`` (proxy/store/protocols/retrieval_rows.py): a retrieval's
table reads, by vector key through the key index."""

from __future__ import annotations

import sys

from proxy.store.duckdb.connection import Con, Database
from proxy.store.sql_retrieval_rows import SqlRetrievalRows


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


def chunk_texts(con: Con, keys: list[int]) -> dict[str, tuple[str, int]]:
    """id -> (content, tokens) of the chunks with these vector keys. By key, through the key index:
    matching ids would scan every chunk id (16 ms at 1M)."""
    if not keys:
        return {}
    rows = con.execute("SELECT id, content, tokens FROM chunks WHERE key IN (SELECT unnest(?::BIGINT[]))",
                       [keys]).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def extractions(con: Con, chunk_ids: list[str]) -> dict[str, str]:
    if not chunk_ids:
        return {}
    return dict(con.execute("SELECT chunk_id, result FROM extractions WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))",
                            [chunk_ids]).fetchall())


class DuckDBRetrievalRows(SqlRetrievalRows):
    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db
