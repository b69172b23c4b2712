"""``graphgate reindex``: rebuild the vector indexes and the graph from the tables, and re-embed
everything when the embedding model (or its dimension) changed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from proxy.core.errors import Conflict
from proxy.core.limiter import Priority, PriorityLimiter
from proxy.core.settings import Settings
from proxy.merging.rules import embed_hash, entity_text, relation_text
from proxy.store.backends import backend_for
from proxy.store.changes import Changeset
from proxy.store.store import INDEXED_TABLES, KnowledgeStore
from proxy.upstream.model_calls import ModelClient
from proxy.upstream.pool import connect

if TYPE_CHECKING:
    from proxy.knowledge.service import Knowledge

log = logging.getLogger("graphgate.reindex")
BATCH = 256

Progress = Callable[[str, int, int], None]


async def _texts(store: KnowledgeStore, table: str) -> list[tuple[str, str]]:
    """(row id, the text its vector embeds) of every row of ``table``."""
    tables = store.tables.reembed
    if table == "chunks":
        return await tables.chunk_texts()
    if table == "entities":
        return [(key, entity_text(name, description)) for key, name, description in await tables.entity_texts()]
    return [(pair, relation_text(keywords, source, target, description))
            for pair, keywords, source, target, description in await tables.relation_texts()]


async def reembed(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> None:
    models.expected_dim = None  # the new model decides the dimension
    # community summaries are derived: removed, and written again at the next idle run of a gateway
    # (from the LLM cache, so only their embeddings are new)
    stale = list(await anyio.to_thread.run_sync(store.tables.communities.digests_sync))
    if stale:
        await store.apply(Changeset(communities_removed=stale))
    for table in INDEXED_TABLES:
        rows = await _texts(store, table)
        for start in range(0, len(rows), BATCH):
            batch = rows[start:start + BATCH]
            vectors = await models.embed([text for _, text in batch], priority=Priority.INGEST)
            hashes = None if table == "chunks" else [embed_hash(settings.embed_model, t) for _, t in batch]
            await store.tables.reembed.store_vectors(table, [i for i, _ in batch], vectors, hashes)
            progress(f"re-embedding {table}", start + len(batch), len(rows))
    await store.tables.reembed.record_model(settings.embed_model, models.expected_dim)


async def reindex(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> dict[str, int]:
    recorded = await store.tables.reembed.recorded_model()
    if recorded not in (None, settings.embed_model):
        log.info("embedding model changed from %s to %s: re-embedding everything", recorded, settings.embed_model)
        await reembed(store, models, settings, progress)
    progress("rebuilding indexes and graph", 0, 1)
    sizes = await store.rebuild()
    progress("rebuilding indexes and graph", 1, 1)
    return sizes


async def rebuild_live(knowledge: Knowledge, settings: Settings, progress: Progress) -> dict[str, int]:
    """Rebuild the vector indexes and the graph of the store a running service holds (the MCP
    rebuild_index tool): no merge, curation or other commit runs meanwhile, and retrievals wait for
    the rebuilt indexes. Re-embedding is refused here (Conflict): a new embedding model changes the
    vectors' dimension under the chats being served; ``graphgate reindex`` does it with the store to itself."""
    recorded = await knowledge.store.tables.reembed.recorded_model()
    if recorded not in (None, settings.embed_model):
        raise Conflict(f"the store's vectors come from {recorded}, not the configured {settings.embed_model}: "
                       "re-embedding needs the store to itself (stop the gateway and run `graphgate reindex`)")
    async with knowledge.pipeline.merger.exclusive(), knowledge.store.apply_lock:
        return await reindex(knowledge.store, knowledge.models, settings, progress)


@contextlib.asynccontextmanager
async def reindexing(settings: Settings,
                     kb: str = "default") -> AsyncIterator[Callable[[Progress], Awaitable[dict[str, int]]]]:
    """The store opened for reindexing (StoreUnavailable when it cannot be): yields ``run(progress)``,
    which reindexes it and answers the sizes of the rebuilt indexes; the store is closed afterwards."""
    store = await KnowledgeStore.open(settings.data_dir, settings.vector_dtype, settings.db_memory,
                                      backend_for(settings.store, kb))
    upstream = connect(settings)
    try:
        models = ModelClient(upstream, PriorityLimiter(settings.llm_concurrency), settings)
        models.expected_dim = store.embedding_dim()

        async def run(progress: Progress) -> dict[str, int]:
            return await reindex(store, models, settings, progress)

        yield run
    finally:
        await upstream.aclose()
        await store.close()
