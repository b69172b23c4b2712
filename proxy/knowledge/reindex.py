"""``graphgate reindex``: re-embed everything with GRAPHGATE_EMBED_MODEL when the store's vectors
come from another model (or a re-embedding with it was interrupted), then rebuild the vector
indexes and the graph from the tables.

The re-embedding never mixes two models in a table (proxy/store/protocols/reembed.py): the new
vectors are staged beside the rows, a batch a transaction, and swapped in for every table at once
when all are made. Killed half-way, it keeps what it made: run again, it goes on with the rows
that have no new vector yet, and the store keeps serving its old vectors, whole, meanwhile (on
PostgreSQL a gateway may run beside it; the embedded store needs the gateway stopped).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from proxy.core.errors import Conflict
from proxy.core.limiter import Priority, PriorityLimiter
from proxy.core.settings import Settings
from proxy.merging.rules import embed_hash, entity_text, relation_text
from proxy.store.backends import backend_for
from proxy.store.protocols.reembed import ToEmbed
from proxy.store.store import KnowledgeStore
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, same_model
from proxy.upstream.model_calls import ModelClient
from proxy.upstream.pool import connect

if TYPE_CHECKING:
    from proxy.knowledge.service import Knowledge

log = logging.getLogger("graphgate.reindex")
SWAP_ATTEMPTS = 5   # rounds of "embed what is new" when other replicas keep committing meanwhile

Progress = Callable[[str, int, int], None]


def text_of(table: str, row: ToEmbed) -> str:
    """The text a row's vector embeds, as the merge stage makes it (proxy/merging/rules.py)."""
    if table == "chunks":
        return str(row.fields[0])
    if table == "entities":
        return entity_text(*row.fields)
    return relation_text(*row.fields)


async def needs_reembedding(store: KnowledgeStore, model: str) -> bool:
    """Whether a table records another model than ``model`` (even an empty one: the store's
    dimension is that model's until a re-embedding records the new one) or holds vectors of a model
    not recorded, or a re-embedding with ``model`` was interrupted."""
    tables = store.tables.reembed
    records = await tables.models()
    for table in VECTOR_TABLES:
        recorded = records[table].model
        if store.vector_count(table) if recorded is None else not same_model(recorded, model):
            return True
    return any(same_model(staged, model) for staged in await tables.staged_models())


async def reembed(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> dict[str, int]:
    """Every row of the re-embedded tables given a vector by GRAPHGATE_EMBED_MODEL, then swapped in;
    how many vectors this run made per table."""
    tables = store.tables.reembed
    target = settings.embed_model
    models.expected_dim = None   # the new model decides the dimension
    # asked first: a model the upstream lacks stops here, and its dimension is known even when no row needs a vector
    dim = int((await models.embed(["dimension check"], priority=Priority.INGEST)).shape[1])
    if dropped := await tables.discard_staged(target, dim):
        log.info("dropped %d vectors staged by an earlier re-embedding with another model", dropped)
    batch = settings.embed_batch * settings.embed_concurrency   # the embedding calls of one staged batch run together
    made = dict.fromkeys(REEMBEDDED, 0)
    for _ in range(SWAP_ATTEMPTS):
        for table in REEMBEDDED:
            what = f"re-embedding {table} with {target}"
            done, total = await tables.progress(table, target)
            progress(what, done, total)
            after = None
            while rows := await tables.to_embed(table, target, after, batch):
                texts = [text_of(table, row) for row in rows]
                vectors = await models.embed(texts, priority=Priority.INGEST)
                hashes = None if table == "chunks" else [embed_hash(target, text) for text in texts]
                await tables.stage(table, target, rows, vectors, hashes)
                done, after, made[table] = done + len(rows), rows[-1].id, made[table] + len(rows)
                progress(what, done, max(total, done))
        if await tables.swap(target, dim):
            return made
        log.info("rows were committed during the re-embedding: embedding them too")
    raise Conflict(f"the knowledge store kept changing during the re-embedding with {target} ({SWAP_ATTEMPTS} rounds): "
                   "run `graphgate reindex` again when fewer documents are being ingested")


async def reindex(store: KnowledgeStore, models: ModelClient, settings: Settings, progress: Progress) -> dict[str, int]:
    """Re-embed when needed, then rebuild; the sizes of the rebuilt indexes."""
    if await needs_reembedding(store, settings.embed_model):
        log.info("re-embedding everything with %s", settings.embed_model)
        made = await reembed(store, models, settings, progress)
        log.info("re-embedded with %s: %s", settings.embed_model, ", ".join(f"{t} {n}" for t, n in made.items()))
    else:   # the store is of the configured model: vectors staged for another one are not needed
        await store.tables.reembed.discard_staged(None)
    progress("rebuilding indexes and graph", 0, 1)
    sizes = await store.rebuild()
    progress("rebuilding indexes and graph", 1, 1)
    return sizes


async def rebuild_live(knowledge: Knowledge, settings: Settings, progress: Progress) -> dict[str, int]:
    """Rebuild the vector indexes and the graph of the store a running service holds (the MCP
    rebuild_index tool): no merge, curation or other commit runs meanwhile, and retrievals wait for
    the rebuilt indexes. Re-embedding is refused here (Conflict): the new vectors would change
    under the chats being served; ``graphgate reindex`` does it."""
    problem = (await knowledge.embedding.refresh()).problem()
    if problem is not None:
        raise Conflict(f"this tool rebuilds the indexes but does not re-embed: {problem}")
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
        models = ModelClient(upstream, PriorityLimiter(settings.llm_concurrency), settings,
                             embed_limiter=PriorityLimiter(settings.embed_concurrency))
        models.expected_dim = store.embedding_dim()

        async def run(progress: Progress) -> dict[str, int]:
            return await reindex(store, models, settings, progress)

        yield run
    finally:
        await upstream.aclose()
        await store.close()
