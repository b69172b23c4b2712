"""Re-embedding in DuckDB (``ReembedTables``): the texts to embed again, their new vectors, the
model recorded."""

from __future__ import annotations

import numpy as np

from proxy.store.duckdb.connection import Con, Database, bump_generation, get_meta, next_keys, set_meta

_ID = {"chunks": "id", "entities": "name_key", "relations": "pair_key"}


def chunk_texts(con: Con) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute("SELECT id, content FROM chunks ORDER BY id").fetchall()]


def entity_texts(con: Con) -> list[tuple[str, str, str]]:
    return [(r[0], r[1], r[2]) for r in con.execute(
        "SELECT name_key, name, description FROM entities ORDER BY name_key").fetchall()]


def relation_texts(con: Con) -> list[tuple[str, list[str], str, str, str]]:
    rows = con.execute("""SELECT r.pair_key, r.keywords, coalesce(s.name, r.source), coalesce(t.name, r.target),
                                 r.description
                          FROM relations r LEFT JOIN entities s ON s.name_key = r.source
                          LEFT JOIN entities t ON t.name_key = r.target ORDER BY r.pair_key""").fetchall()
    return [(r[0], list(r[1]), r[2], r[3], r[4]) for r in rows]


def store_vectors(con: Con, table: str, ids: list[str], vectors: np.ndarray, hashes: list[str] | None) -> None:
    for i, (row_id, vector) in enumerate(zip(ids, vectors, strict=True)):
        key = next_keys(con, 1)[0]
        if hashes is None:
            con.execute(f"UPDATE {table} SET key = ?, embedding = ? WHERE {_ID[table]} = ?",
                        [key, vector.tolist(), row_id])
        else:
            con.execute(f"UPDATE {table} SET key = ?, embedding = ?, embed_hash = ? WHERE {_ID[table]} = ?",
                        [key, vector.tolist(), hashes[i], row_id])


def record_model(con: Con, model: str, dim: int | None) -> None:
    if dim:
        set_meta(con, "embed_dim", dim)
    set_meta(con, "embed_model", model)
    bump_generation(con)


class DuckDBReembed:
    """``ReembedTables`` over DuckDB."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def chunk_texts(self) -> list[tuple[str, str]]:
        return await self.db.read(chunk_texts)

    async def entity_texts(self) -> list[tuple[str, str, str]]:
        return await self.db.read(entity_texts)

    async def relation_texts(self) -> list[tuple[str, list[str], str, str, str]]:
        return await self.db.read(relation_texts)

    async def store_vectors(self, table: str, ids: list[str], vectors: np.ndarray,
                            hashes: list[str] | None) -> None:
        if table not in _ID:
            raise ValueError(f"no vectors in table {table}")
        await self.db.write(store_vectors, table, ids, vectors, hashes)

    async def record_model(self, model: str, dim: int | None) -> None:
        await self.db.write(record_model, model, dim)

    async def recorded_model(self) -> str | None:
        return await self.db.read(get_meta, "embed_model")
