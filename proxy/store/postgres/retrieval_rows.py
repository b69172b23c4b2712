"""The PostgreSQL side of ``RetrievalRows`` (proxy/store/protocols/retrieval_rows.py): a retrieval's
table reads, by vector key through the key index."""

from __future__ import annotations

import sys

from psycopg import sql

from proxy.store.postgres.connection import Con, PgDatabase
from proxy.store.sql_retrieval_rows import SqlRetrievalRows

ID_COLUMN = {"entities": "name_key", "relations": "pair_key"}


def descriptions(con: Con, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
    """Descriptions of entities or relations, by vector key (through the key index), for
    ``wanted`` (vector key, name or pair key) pairs. A row re-embedded (so re-keyed) by a commit since
    its key was read is found again by its name or pair."""
    if not wanted:
        return {}
    id_column = ID_COLUMN[table]
    found: dict[int, str] = dict(con.execute(
        sql.SQL("SELECT key, description FROM {} WHERE key = ANY(%s::bigint[])").format(sql.Identifier(table)),
        [[int(key) for key, _ in wanted]]).fetchall())
    missing = {name: key for key, name in wanted if key not in found}
    if missing:
        for name, description in con.execute(
                sql.SQL("SELECT {column}, description FROM {table} WHERE {column} = ANY(%s::text[])").format(
                    column=sql.Identifier(id_column), table=sql.Identifier(table)), [list(missing)]).fetchall():
            found[missing[name]] = description
    return found


def chunk_texts(con: Con, keys: list[int]) -> dict[str, tuple[str, int]]:
    """id -> (content, tokens) of the chunks with these vector keys. By key, through the key index:
    matching ids would scan every chunk id."""
    if not keys:
        return {}
    rows = con.execute("SELECT id, content, tokens FROM chunks WHERE key = ANY(%s::bigint[])",
                       [[int(key) for key in keys]]).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def extractions(con: Con, chunk_ids: list[str]) -> dict[str, str]:
    if not chunk_ids:
        return {}
    return dict(con.execute("SELECT chunk_id, result FROM extractions WHERE chunk_id = ANY(%s::text[])",
                            [list(chunk_ids)]).fetchall())


class PgRetrievalRows(SqlRetrievalRows):
    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db
