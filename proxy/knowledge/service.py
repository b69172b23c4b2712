"""The knowledge side of the gateway: store, model client and pipeline, started and stopped together.

If the store cannot be opened (a read-only or full disk, say) the gateway still proxies every
chat unaugmented; the knowledge endpoints answer 503 with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from typing import Any

import anyio
from anyio.abc import TaskGroup

from proxy.core.errors import UpstreamError
from proxy.merging.curation import Curator
from proxy.ingest.inbox import watch_inbox
from proxy.ingest.pipeline import Pipeline
from proxy.merging.suggestions import SuggestionFinder
from proxy.core.limiter import PriorityLimiter
from proxy.upstream.model_info import ModelInfoCache
from proxy.upstream.model_calls import CacheEntry, ModelClient
from proxy.retrieval.retriever import Retriever
from proxy.store.duckdb.batching import BatchedReader, BatchWriter
from proxy.knowledge.traces import Trace, record_traces
from proxy.core.settings import Settings
from proxy.ingest.documents import cached_responses, write_cache
from proxy.store.store import KnowledgeStore
from proxy.store.duckdb.connection import get_meta
from proxy.core.tokens import Tokenizer, get_tokenizer
from proxy.upstream.client import Upstream

log = logging.getLogger("graphgate")


@dataclass
class Knowledge:
    store: KnowledgeStore
    models: ModelClient
    pipeline: Pipeline
    tokenizer: Tokenizer
    retriever: Retriever
    model_info: ModelInfoCache
    group: TaskGroup
    traces: BatchWriter[Trace]
    cache_writes: BatchWriter[CacheEntry]
    cache_reads: BatchedReader[tuple[str, str], str]
    curator: Curator
    suggestions: SuggestionFinder

    def record(self, trace: Trace) -> None:
        """Keep a chat turn's trace, off the chat's path."""
        self.group.start_soon(_quietly, self.traces.write, trace)

    def remember(self, entry: CacheEntry) -> None:
        self.group.start_soon(_quietly, self.cache_writes.write, entry)

    def remember_answer(self, model: str, key: str, request: bytes, response: bytes) -> None:
        self.remember(CacheEntry("answer", key, model, request.decode("utf-8", "replace"),
                                 response.decode("utf-8", "replace")))

    async def cached(self, kind: str, key: str) -> str | None:
        return await self.cache_reads.get((kind, key))


async def _quietly(write: Any, item: Any) -> None:
    try:
        await write(item)
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never break a chat
        log.warning("could not record %s: %s", type(item).__name__, exc)


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
        except OSError as exc:  # e.g. a full disk: try again next time, keep serving
            log.warning("could not save the vector indexes: %s", exc)


@asynccontextmanager
async def run_knowledge(settings: Settings, upstream: Upstream) -> AsyncIterator[Knowledge]:
    store = await KnowledgeStore.open(settings.data_dir, settings.vector_dtype, settings.db_memory)
    try:
        limiter = PriorityLimiter(settings.llm_concurrency)

        cache_reads = BatchedReader(store.db, cached_responses)

        async def lookup(kind: str, key: str) -> str | None:
            return await cache_reads.get((kind, key))

        models = ModelClient(upstream, limiter, settings, cache_lookup=lookup,
                             embed_limiter=PriorityLimiter(settings.embed_concurrency))
        models.expected_dim = store.embedding_dim()
        await check_embedding_model(store, models, settings)
        tokenizer = await anyio.to_thread.run_sync(get_tokenizer)
        pipeline = Pipeline(store, models, settings, tokenizer)
        retriever = Retriever(store, models, settings, tokenizer)
        model_info = ModelInfoCache(upstream, settings.discovery_timeout)
        traces = BatchWriter(store.db, record_traces, max_delay=0.2)
        cache_writes = BatchWriter(store.db, lambda con, entries: write_cache(con, entries, []), max_delay=0.2)
        async with anyio.create_task_group() as group:
            await pipeline.start(group)
            group.start_soon(traces.run)
            group.start_soon(cache_writes.run)
            group.start_soon(_save_periodically, store, settings.index_save_seconds)
            if settings.inbox_dir is not None:
                group.start_soon(watch_inbox, settings.inbox_dir, pipeline, settings)
            try:
                knowledge = Knowledge(store, models, pipeline, tokenizer, retriever, model_info, group, traces,
                                      cache_writes, cache_reads, Curator(pipeline), SuggestionFinder(store))
                # merge suggestions take seconds on a big graph: have them ready before anyone asks
                knowledge.suggestions.refresh_in_background(settings.suggest_threshold)
                retriever.remember = knowledge.remember
                yield knowledge
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
