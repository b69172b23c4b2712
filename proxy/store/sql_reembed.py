"""Re-embedding over either backend (``ReembedTables``, proxy/store/protocols/reembed.py): each vector
table's recorded model, the rows still to embed, their new vectors staged, and all of them swapped
in at once. Written once in the SQL both engines speak (proxy/store/sql_dialect.py); a backend adds
(``sql``) how it stages vectors, and what it does around the swap, where its vector columns and
indexes part."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_dialect import Sql
from proxy.store.sql_meta import get_meta, set_meta
from proxy.store.sql_runner import SqlAdapter
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, TableModel, dim_key, model_key, read_models

ID = {"chunks": "id", "entities": "name_key", "relations": "pair_key"}
# each table's rows, with what their vector is made from (``source``) and the fields of its text
_ROWS = {
    "chunks": "SELECT t.id AS id, t.id AS source, t.content FROM chunks t",
    "entities": "SELECT t.name_key AS id, t.embed_hash AS source, t.name, t.description FROM entities t",
    "relations": """SELECT t.pair_key AS id, t.embed_hash AS source, t.keywords, coalesce(s.name, t.source),
                           coalesce(e.name, t.target), t.description
                    FROM relations t LEFT JOIN entities s ON s.name_key = t.source
                    LEFT JOIN entities e ON e.name_key = t.target""",
}
_SOURCE = {"chunks": "id", "entities": "embed_hash", "relations": "embed_hash"}


def current(table: str) -> str:
    """The join to a row's staged vector when it is current: for the model (parameters: the table,
    the model), and made from what the row holds now."""
    return f"reembedding r ON r.tbl = ? AND r.id = t.{ID[table]} AND r.model = ? AND r.source = t.{_SOURCE[table]}"


def to_embed(sql: Sql, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
    past = "" if after is None else 'WHERE id > ? COLLATE "C"'
    rows = sql.execute(f"""SELECT * FROM ({_ROWS[table]} LEFT JOIN {current(table)} WHERE r.id IS NULL) AS pending
                           {past} ORDER BY id COLLATE "C" LIMIT ?""",
                       [table, model, *([] if after is None else [after]), limit]).fetchall()
    return [ToEmbed(r[0], r[1], tuple(list(v) if isinstance(v, list) else v for v in r[2:])) for r in rows]


def progress(sql: Sql, table: str, model: str) -> tuple[int, int]:
    row = sql.execute(f"SELECT count(r.id), count(*) FROM {table} t LEFT JOIN {current(table)}",
                      [table, model]).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def staged_models(sql: Sql) -> dict[str, int]:
    return {model: int(count) for model, count in
            sql.execute("SELECT model, count(*) FROM reembedding GROUP BY model").fetchall()}


def all_staged(sql: Sql, model: str) -> bool:
    """Whether every row of every re-embedded table has its current vector for ``model`` staged."""
    return not any(sql.one(f"SELECT count(*) FROM {table} t LEFT JOIN {current(table)} WHERE r.id IS NULL",
                           [table, model]) for table in REEMBEDDED)


def models(sql: Sql) -> dict[str, TableModel]:
    return read_models(lambda key: get_meta(sql, key))


def discard_staged(sql: Sql, keep: str | None, dim: int | None) -> int:
    where, params = "", list[str | int]()
    if keep is not None:
        where, params = "WHERE model <> ?", [keep]
        if dim is not None:
            where, params = f"WHERE model <> ? OR {sql.dimensions('embedding')} <> ?", [keep, dim]
    return len(sql.execute(f"DELETE FROM reembedding {where} RETURNING 1", params).fetchall())


def swap(sql: Sql, model: str, dim: int, around: SqlReembed) -> bool:
    """Every staged vector for ``model`` in place of its row's, all at once, when every row has one."""
    if not all_staged(sql, model):
        return False
    sql.execute("DELETE FROM communities")   # summarised again under the new model
    around.before_swap(sql.con)
    for table in REEMBEDDED:
        hashed = ", embed_hash = r.embed_hash" if table != "chunks" else ""
        # each vector under a new key (the indexes are rebuilt from the tables afterwards)
        sql.execute(f"""UPDATE {table} AS t SET key = nextval('vector_keys'), embedding = r.embedding{hashed}
                        FROM reembedding r WHERE r.tbl = ? AND r.id = t.{ID[table]} AND r.model = ?""",
                    [table, model])
    sql.execute("DELETE FROM reembedding")
    around.after_swap(sql.con, dim)
    for table in VECTOR_TABLES:
        set_meta(sql, model_key(table), model)
        set_meta(sql, dim_key(table), dim)
    set_meta(sql, "embed_model", model)
    around.swapped(sql.con)
    return True


def checked(rows: list[ToEmbed], vectors: np.ndarray, hashes: list[str] | None) -> None:
    if len(rows) != len(vectors) or (hashes is not None and len(hashes) != len(rows)):
        raise ValueError(f"{len(rows)} rows for {len(vectors)} vectors")


class SqlReembed(SqlAdapter):
    """``ReembedTables`` over either backend (see the module's docstring)."""

    sql: ModuleType   # the backend's stage(sql, table, model, rows, vectors, hashes)

    async def models(self) -> dict[str, TableModel]:
        return await self.read(models)

    async def to_embed(self, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
        return await self.read(to_embed, _reembedded(table), model, after, limit)

    async def progress(self, table: str, model: str) -> tuple[int, int]:
        return await self.read(progress, _reembedded(table), model)

    async def staged_models(self) -> dict[str, int]:
        return await self.read(staged_models)

    async def discard_staged(self, keep: str | None, dim: int | None = None) -> int:
        return await self.write(discard_staged, keep, dim)

    async def stage(self, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
                    hashes: list[str] | None) -> None:
        table = _reembedded(table)
        checked(rows, vectors, hashes)
        if rows:
            await self.write(self.sql.stage, table, model, rows, vectors, hashes)

    async def swap(self, model: str, dim: int) -> bool:
        return await self.write(swap, model, dim, self)

    # around the swap, in its transaction: what the backend's vector columns need

    def before_swap(self, con: Any) -> None:
        """Before the vectors are written."""

    def after_swap(self, con: Any, dim: int) -> None:
        """After they are (``dim``: the new model's dimension)."""
        raise NotImplementedError

    def swapped(self, con: Any) -> None:
        """The swap is written: its generation."""
        raise NotImplementedError


def _reembedded(table: str) -> str:
    """``table`` when it holds vectors to re-embed (its name goes into the statements)."""
    if table not in REEMBEDDED:
        raise ValueError(f"no vectors to re-embed in table {table}")
    return table
