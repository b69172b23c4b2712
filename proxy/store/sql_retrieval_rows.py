"""The texts retrieval reads per turn (``RetrievalRows``, proxy/store/protocols/retrieval_rows.py),
over either backend, written once in the SQL both engines speak (proxy/store/sql_dialect.py): a
retrieval's table reads, by vector key through the key index."""

from __future__ import annotations

from proxy.store.sql_dialect import Sql
from proxy.store.sql_runner import SqlAdapter

ID_COLUMN = {"entities": "name_key", "relations": "pair_key"}


def descriptions(sql: Sql, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
    """Descriptions of entities or relations, by vector key (through the key index), for
    ``wanted`` (vector key, name or pair key) pairs. A row re-embedded (so re-keyed) by a commit since
    its key was read is found again by its name or pair."""
    if not wanted:
        return {}
    id_column = ID_COLUMN[table]   # the table's name is one of two, never a caller's text
    found: dict[int, str] = dict(sql.execute(f"SELECT key, description FROM {table} WHERE {sql.among('key', 'bigint')}",
                                             [[int(key) for key, _ in wanted]]).fetchall())
    missing = {name: key for key, name in wanted if key not in found}
    if missing:
        for name, description in sql.execute(f"SELECT {id_column}, description FROM {table} "
                                             f"WHERE {sql.among(id_column, 'text')}", [list(missing)]).fetchall():
            found[missing[name]] = description
    return found


def chunk_texts(sql: Sql, keys: list[int]) -> dict[str, tuple[str, int]]:
    """id -> (content, tokens) of the chunks with these vector keys. By key, through the key index:
    matching ids would scan every chunk id (16 ms at 1M in DuckDB)."""
    if not keys:
        return {}
    rows = sql.execute(f"SELECT id, content, tokens FROM chunks WHERE {sql.among('key', 'bigint')}",
                       [[int(key) for key in keys]]).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def extractions(sql: Sql, chunk_ids: list[str]) -> dict[str, str]:
    if not chunk_ids:
        return {}
    return dict(sql.execute(f"SELECT chunk_id, result FROM extractions WHERE {sql.among('chunk_id', 'text')}",
                            [list(chunk_ids)]).fetchall())


class SqlRetrievalRows(SqlAdapter):
    """Descriptions, chunk texts and extraction results by key."""

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        return self.read_sync(descriptions, table, wanted)

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]:
        return self.read_sync(chunk_texts, keys)

    def extractions_sync(self, chunk_ids: list[str]) -> dict[str, str]:
        return self.read_sync(extractions, chunk_ids)
