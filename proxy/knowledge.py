"""The knowledge side of the gateway: store, model client and pipeline, started and stopped together.

If the store cannot be opened (a read-only or full disk, say) the gateway still proxies every
chat unaugmented; the knowledge endpoints answer 503 with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from .errors import UpstreamError
from .ingest.inbox import watch_inbox
from .ingest.pipeline import Pipeline
from .limiter import PriorityLimiter
from .models import ModelClient
from .settings import Settings
from .ingest.documents import cached_response
from .store.knowledge import KnowledgeStore
from .store.tables_duckdb import get_meta
from .tokens import Tokenizer, get_tokenizer
from .upstream import Upstream

log = logging.getLogger("graphgate")


@dataclass
class Knowledge:
    store: KnowledgeStore
    models: ModelClient
    pipeline: Pipeline
    tokenizer: Tokenizer


async def check_embedding_model(store: KnowledgeStore, models: ModelClient, settings: Settings) -> None:
    """Refuse to start when the configured embedding model no longer fits the stored vectors."""
    recorded = store.db.read_sync(get_meta, "embed_model")
    if models.expected_dim is None or recorded in (None, settings.embed_model):
        return
    try:
        await models.embed(["dimension check"], priority=0)  # type: ignore[arg-type]
    except UpstreamError as exc:
        log.warning("could not check embedding model %s against the store (%s); checking on first use",
                    settings.embed_model, exc.message)


async def _save_periodically(store: KnowledgeStore, seconds: float) -> None:
    while True:
        await anyio.sleep(seconds)
        try:
            await store.save()
        except OSError as exc:
            log.error("could not save the vector indexes: %s", exc)


@asynccontextmanager
async def run_knowledge(settings: Settings, upstream: Upstream) -> AsyncIterator[Knowledge]:
    store = await KnowledgeStore.open(settings.data_dir)
    try:
        limiter = PriorityLimiter(settings.llm_concurrency)

        async def lookup(kind: str, key: str) -> str | None:
            return await store.db.read(cached_response, kind, key)

        models = ModelClient(upstream, limiter, settings, cache_lookup=lookup)
        models.expected_dim = store.embedding_dim()
        await check_embedding_model(store, models, settings)
        tokenizer = await anyio.to_thread.run_sync(get_tokenizer)
        pipeline = Pipeline(store, models, settings, tokenizer)
        async with anyio.create_task_group() as group:
            await pipeline.start(group)
            group.start_soon(_save_periodically, store, settings.index_save_seconds)
            if settings.inbox_dir is not None:
                group.start_soon(watch_inbox, settings.inbox_dir, pipeline, settings)
            try:
                yield Knowledge(store, models, pipeline, tokenizer)
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
