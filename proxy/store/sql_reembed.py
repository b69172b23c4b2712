"""Re-embedding over either backend (``ReembedTables``, proxy/store/protocols/reembed.py): each vector
table's recorded model, the rows still to embed, their new vectors staged, and all of them swapped
in at once. What each row's vector is made from, and which rows still wait, is written once in the
SQL both engines speak (proxy/store/sql_dialect.py); a backend adds (``sql``) how it reads the
recorded models, stages vectors and swaps them in, where its vector columns and indexes part."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from proxy.store.protocols.reembed import ToEmbed
from proxy.store.sql_dialect import Sql
from proxy.store.sql_runner import Runner, SqlAdapter
from proxy.store.vector_models import REEMBEDDED, TableModel

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


def checked(rows: list[ToEmbed], vectors: np.ndarray, hashes: list[str] | None) -> None:
    if len(rows) != len(vectors) or (hashes is not None and len(hashes) != len(rows)):
        raise ValueError(f"{len(rows)} rows for {len(vectors)} vectors")


class SqlReembed(SqlAdapter):
    """``ReembedTables`` over either backend (see the module's docstring)."""

    sql: ModuleType   # the backend's models(sql), discard_staged(sql, keep, dim), stage(...), swap(sql, model, dim)

    def __init__(self, db: Runner) -> None:
        super().__init__(db)
        self.swapping: Callable[..., Any] = self.sql.swap

    async def models(self) -> dict[str, TableModel]:
        return await self.read(self.sql.models)

    async def to_embed(self, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
        return await self.read(to_embed, _reembedded(table), model, after, limit)

    async def progress(self, table: str, model: str) -> tuple[int, int]:
        return await self.read(progress, _reembedded(table), model)

    async def staged_models(self) -> dict[str, int]:
        return await self.read(staged_models)

    async def discard_staged(self, keep: str | None, dim: int | None = None) -> int:
        return await self.write(self.sql.discard_staged, keep, dim)

    async def stage(self, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
                    hashes: list[str] | None) -> None:
        table = _reembedded(table)
        checked(rows, vectors, hashes)
        if rows:
            await self.write(self.sql.stage, table, model, rows, vectors, hashes)

    async def swap(self, model: str, dim: int) -> bool:
        return await self.write(self.swapping, model, dim)


def _reembedded(table: str) -> str:
    """``table`` when it holds vectors to re-embed (its name goes into the statements)."""
    if table not in REEMBEDDED:
        raise ValueError(f"no vectors to re-embed in table {table}")
    return table
