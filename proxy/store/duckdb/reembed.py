"""Re-embedding in DuckDB (``ReembedTables``, proxy/store/protocols/reembed.py): each vector table's
recorded model, the rows still to embed, their new vectors staged, and all of them swapped in at
once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from proxy.store.duckdb.commit import vectors_column
from proxy.store.duckdb.connection import Con, Database, bump_generation, get_meta, set_meta
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_subjects import ReembedQueries, SqlReembed
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, TableModel, dim_key, model_key, read_models

_ID = {"chunks": "id", "entities": "name_key", "relations": "pair_key"}
# each table's rows, with what their vector is made from (``source``) and the fields of its text
_ROWS = {
    "chunks": "SELECT t.id AS id, t.id AS source, t.content FROM chunks t",
    "entities": "SELECT t.name_key AS id, t.embed_hash AS source, t.name, t.description FROM entities t",
    "relations": """SELECT t.pair_key AS id, t.embed_hash AS source, t.keywords, coalesce(s.name, t.source),
                           coalesce(e.name, t.target), t.description
                    FROM relations t LEFT JOIN entities s ON s.name_key = t.source
                    LEFT JOIN entities e ON e.name_key = t.target""",
}
# a staged vector is current when it is for the model and was made from what the row holds now
_CURRENT = """reembedding r ON r.tbl = ? AND r.id = t.{id} AND r.model = ? AND r.source = t.{source}"""
_SOURCE = {"chunks": "id", "entities": "embed_hash", "relations": "embed_hash"}


def _current(table: str) -> str:
    return _CURRENT.format(id=_ID[table], source=_SOURCE[table])


def models(con: Con) -> dict[str, TableModel]:
    return read_models(lambda key: get_meta(con, key))


def to_embed(con: Con, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
    past = "" if after is None else "WHERE id > ?"
    rows = con.execute(f"""SELECT * FROM ({_ROWS[table]} LEFT JOIN {_current(table)} WHERE r.id IS NULL) AS pending
                           {past} ORDER BY id LIMIT ?""",
                       [table, model, *([] if after is None else [after]), limit]).fetchall()
    return [ToEmbed(r[0], r[1], tuple(list(v) if isinstance(v, list) else v for v in r[2:])) for r in rows]


def progress(con: Con, table: str, model: str) -> tuple[int, int]:
    row = con.execute(f"SELECT count(r.id), count(*) FROM {table} t LEFT JOIN {_current(table)}",
                      [table, model]).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def staged_models(con: Con) -> dict[str, int]:
    return dict(con.execute("SELECT model, count(*) FROM reembedding GROUP BY model").fetchall())


def discard_staged(con: Con, keep: str | None, dim: int | None) -> int:
    where, params = "", list[str | int]()
    if keep is not None:
        where, params = "WHERE model <> ?", [keep]
        if dim is not None:
            where, params = "WHERE model <> ? OR len(embedding) <> ?", [keep, dim]
    return len(con.execute(f"DELETE FROM reembedding {where} RETURNING 1", params).fetchall())


def stage(con: Con, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
          hashes: list[str] | None) -> None:
    if len(rows) != len(vectors) or (hashes is not None and len(hashes) != len(rows)):
        raise ValueError(f"{len(rows)} rows for {len(vectors)} vectors")
    if not rows:
        return
    frame = pa.table({"tbl": [table] * len(rows), "id": [r.id for r in rows], "model": [model] * len(rows),
                      "source": [r.source for r in rows],
                      "embed_hash": pa.array(hashes if hashes is not None else [None] * len(rows), pa.string()),
                      "embedding": vectors_column(list(vectors))})
    con.register("staged", frame)
    try:
        con.execute("INSERT OR REPLACE INTO reembedding SELECT * FROM staged")
    finally:
        con.unregister("staged")


def swap(con: Con, model: str, dim: int) -> bool:
    for table in REEMBEDDED:
        row = con.execute(f"SELECT count(*) FROM {table} t LEFT JOIN {_current(table)} WHERE r.id IS NULL",
                          [table, model]).fetchone()
        if row and row[0]:
            return False
    for table in REEMBEDDED:
        hashed = ", embed_hash = r.embed_hash" if table != "chunks" else ""
        # each vector under a new key (the indexes are rebuilt from the tables afterwards)
        con.execute(f"""UPDATE {table} SET key = nextval('vector_keys'), embedding = r.embedding{hashed}
                        FROM reembedding r WHERE r.tbl = ? AND r.id = {table}.{_ID[table]} AND r.model = ?""",
                    [table, model])
    con.execute("DELETE FROM communities")
    con.execute("DELETE FROM reembedding")
    for table in VECTOR_TABLES:
        set_meta(con, model_key(table), model)
        set_meta(con, dim_key(table), dim)
    set_meta(con, "embed_model", model)
    set_meta(con, "embed_dim", dim)
    bump_generation(con)
    return True


QUERIES = ReembedQueries(models=models, to_embed=to_embed, progress=progress, staged_models=staged_models,
                         discard_staged=discard_staged, stage=stage, swap=swap)


class DuckDBReembed(SqlReembed):
    def __init__(self, db: Database) -> None:
        super().__init__(db, QUERIES)
