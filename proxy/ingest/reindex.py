"""``graphgate reindex``: rebuild the vector indexes and the graph from DuckDB, and re-embed
everything when the embedding model (or its dimension) changed."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio.to_thread
import numpy as np

from proxy.core.limiter import Priority
from proxy.upstream.model_calls import ModelClient
from proxy.core.settings import Settings
from proxy.store.store import INDEXED_TABLES, KnowledgeStore
from proxy.store.duckdb.connection import Con, bump_generation, get_meta, next_keys, set_meta
from proxy.merging.rules import embed_hash, entity_text, relation_text

log = logging.getLogger("graphgate.reindex")
BATCH = 256

Progress = Callable[[str, int, int], None]

_TEXTS = {
    "chunks": "SELECT id, content FROM chunks ORDER BY id",
    "entities": "SELECT name_key, name, description FROM entities ORDER BY name_key",
    "relations": """SELECT r.pair_key, r.keywords, coalesce(s.name, r.source), coalesce(t.name, r.target), r.description
                    FROM relations r LEFT JOIN entities s ON s.name_key = r.source
                    LEFT JOIN entities t ON t.name_key = r.target ORDER BY r.pair_key""",
}
_ID = {"chunks": "id", "entities": "name_key", "relations": "pair_key"}


def _texts(con: Con, table: str) -> list[tuple[str, str]]:
    rows = con.execute(_TEXTS[table]).fetchall()
    if table == "chunks":
        return [(r[0], r[1]) for r in rows]
    if table == "entities":
        return [(r[0], entity_text(r[1], r[2])) for r in rows]
    return [(r[0], relation_text(list(r[1]), r[2], r[3], r[4])) for r in rows]


def _store_vectors(con: Con, table: str, ids: list[str], vectors: np.ndarray, hashes: list[str] | None) -> None:
    for i, (row_id, vector) in enumerate(zip(ids, vectors, strict=True)):
        key = next_keys(con, 1)[0]
        if hashes is None:
            con.execute(f"UPDATE {table} SET key = ?, embedding = ? WHERE {_ID[table]} = ?",
                        [key, vector.tolist(), row_id])
        else:
            con.execute(f"UPDATE {table} SET key = ?, embedding = ?, embed_hash = ? WHERE {_ID[table]} = ?",
                        [key, vector.tolist(), hashes[i], row_id])


async def reembed(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> None:
    models.expected_dim = None  # the new model decides the dimension
    for table in INDEXED_TABLES:
        rows = await store.db.read(_texts, table)
        for start in range(0, len(rows), BATCH):
            batch = rows[start:start + BATCH]
            vectors = await models.embed([text for _, text in batch], priority=Priority.INGEST)
            hashes = None if table == "chunks" else [embed_hash(settings.embed_model, t) for _, t in batch]
            await store.db.write(_store_vectors, table, [i for i, _ in batch], vectors, hashes)
            progress(f"re-embedding {table}", start + len(batch), len(rows))
    dim = models.expected_dim

    def record(con: Con) -> None:
        if dim:
            set_meta(con, "embed_dim", dim)
        set_meta(con, "embed_model", settings.embed_model)
        store.generation = bump_generation(con)

    await store.db.write(record)


def rebuild_indexes(store: KnowledgeStore) -> dict[str, int]:
    ndim = store.embedding_dim()
    with store.memory_lock:
        for table, index in store.indexes.items():
            index.reset(ndim)
            store._heal_index(table, index, trust=False)
        store._load_memory()
    store.saved_generation = -1
    store._save_sync()
    return {table: len(index) for table, index in store.indexes.items()}


async def reindex(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> dict[str, int]:
    recorded = await store.db.read(get_meta, "embed_model")
    if recorded not in (None, settings.embed_model):
        log.info("embedding model changed from %s to %s: re-embedding everything", recorded, settings.embed_model)
        await reembed(store, models, settings, progress)
    progress("rebuilding indexes and graph", 0, 1)
    sizes = await anyio.to_thread.run_sync(rebuild_indexes, store)
    progress("rebuilding indexes and graph", 1, 1)
    return sizes
