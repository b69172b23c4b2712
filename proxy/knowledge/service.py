"""The knowledge side of the gateway: store, model client and pipeline, started and stopped together.

If the store cannot be opened (a read-only or full disk, say) the gateway still proxies every
chat unaugmented; the knowledge endpoints answer 503 with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from proxy.core.limiter import PriorityLimiter
from proxy.core.settings import Settings
from proxy.core.tokens import Tokenizer, get_tokenizer
from proxy.ingest.inbox import watch_inbox
from proxy.ingest.pipeline import Pipeline
from proxy.knowledge import grounding
from proxy.knowledge.cache import CacheService
from proxy.knowledge.communities import CommunitySummaries
from proxy.knowledge.documents import DocumentService
from proxy.knowledge.embedding_guard import EmbeddingGuard
from proxy.knowledge.graph import GraphService
from proxy.knowledge.grounding import Grounded
from proxy.knowledge.query import QueryOutcome, run_query
from proxy.knowledge.traces import Trace, TraceService
from proxy.monitoring.metrics import Metrics
from proxy.retrieval.budget import Budget, conversation_size
from proxy.retrieval.rerank_http import HttpReranker
from proxy.retrieval.retriever import Retriever
from proxy.store.backends import backend_for
from proxy.store.store import KnowledgeStore
from proxy.upstream.client import Upstream
from proxy.upstream.model_calls import CacheEntry, ModelClient
from proxy.upstream.model_info import ModelInfo, ModelInfoCache

log = logging.getLogger("graphgate")
NAMES_BEFORE_SERVING = 20_000   # entities whose name index is built before the first request (< 1 s)


@dataclass
class Knowledge:
    store: KnowledgeStore
    models: ModelClient
    pipeline: Pipeline
    tokenizer: Tokenizer
    retriever: Retriever
    model_info: ModelInfoCache
    group: TaskGroup
    traces: TraceService
    cache: CacheService
    documents: DocumentService
    graph: GraphService
    communities: CommunitySummaries   # the community summaries' background job
    embedding: EmbeddingGuard         # the store's embedding models against GRAPHGATE_EMBED_MODEL
    metrics: Metrics | None = None    # the gateway's (GET /metrics); None for the CLI's own store
    kb: str = "default"               # the knowledge base's name (the metrics' kb label)

    # the chat pipeline's bookkeeping, in the background (its sub-services do the work)

    def record(self, trace: Trace) -> None:
        """Keep a chat turn's trace, off the chat's path."""
        self.traces.record(trace)
        if self.metrics is not None:   # one place per turn and per query: outcome and retrieval timings
            self.metrics.observe_trace(trace, self.kb)

    def remember(self, entry: CacheEntry) -> None:
        self.cache.remember(entry)

    def remember_answer(self, model: str, key: str, request: bytes, response: bytes) -> None:
        self.cache.remember_answer(model, key, request, response)

    async def cached(self, kind: str, key: str) -> str | None:
        return await self.cache.lookup(kind, key)

    def has_chunks(self) -> bool:
        """Whether there is anything to ground a chat in (no processed document: nothing)."""
        return self.retriever.has_chunks()

    async def ground(self, question: str, history: list[tuple[str, str]], budget: Budget,
                     **how: Any) -> Grounded:
        """The context of a question (``grounding.ground``): the one way every surface asks for it."""
        return await grounding.ground(self.retriever, question, history, budget, **how)

    async def chat_budget(self, messages: list[dict[str, Any]], options: dict[str, Any] | None, info: ModelInfo,
                          *, can_raise: bool) -> Budget:
        """A chat turn's budget: its model's window less the conversation (``grounding.chat_budget``)."""
        return await grounding.chat_budget(self.retriever, self.tokenizer, messages, options, info,
                                           can_raise=can_raise)

    def nothing_found(self, question: str, language: str | None = None) -> str:
        """What a turn asking for the context alone is told when there is none."""
        return grounding.nothing_found(self.retriever.settings.language, question, language)

    async def conversation_size(self, messages: list[dict[str, Any]]) -> int:
        """The tokens of a conversation as the budget counts them."""
        return await conversation_size(messages, self.tokenizer)

    async def query(self, body: Mapping[str, Any], *, api: str = "query") -> QueryOutcome:
        """A retrieval as /rag/query and the playground run it, optionally answered (proxy/knowledge/query.py)."""
        return await run_query(self, body, api=api)

    async def stats(self) -> dict[str, Any]:
        """The store's counts: documents by status, rows, index sizes, graph, generation, bytes on disk."""
        return await self.store.stats()

    @property
    def generation(self) -> int:
        """The knowledge base's version: it moves on with every commit that changes what is indexed
        (cached chat answers are keyed by it, so that a change makes them miss)."""
        return self.store.generation


async def _save_periodically(store: KnowledgeStore, seconds: float) -> None:
    while True:
        await anyio.sleep(seconds)
        try:
            await store.save()
        except OSError as exc:  # e.g. a full disk: try again next time, keep serving
            log.warning("could not save the vector indexes: %s", exc)


@asynccontextmanager
async def run_knowledge(settings: Settings, upstream: Upstream, metrics: Metrics | None = None, *,
                        limiter: PriorityLimiter | None = None,
                        embed_limiter: PriorityLimiter | None = None,
                        kb: str = "default") -> AsyncIterator[Knowledge]:
    """The knowledge service over the store at ``settings.data_dir``. ``limiter`` and ``embed_limiter``:
    the upstream's slots when several knowledge bases share them (proxy/knowledge/bases.py); each
    run makes its own otherwise. ``kb``: the base's name, for the metrics' labels. The task that
    enters this context must be the one that exits it (its task group)."""
    store = await KnowledgeStore.open(settings.data_dir, settings.vector_dtype, settings.db_memory,
                                      backend_for(settings.store, kb))
    reranker = HttpReranker.from_settings(settings, upstream)  # None unless GRAPHGATE_RERANK_URL is set
    try:
        limiter = limiter or PriorityLimiter(settings.llm_concurrency)

        cache = CacheService(store.tables.cache, in_memory=not store.backend.shared)
        traces = TraceService(store.tables.traces)
        models = ModelClient(upstream, limiter, settings, cache_lookup=cache.lookup,
                             embed_limiter=embed_limiter or PriorityLimiter(settings.embed_concurrency),
                             metrics=metrics, kb=kb)
        store.embed_model = settings.embed_model   # a commit never mixes it with another model's vectors
        tokenizer = await anyio.to_thread.run_sync(get_tokenizer)
        pipeline = Pipeline(store, models, settings, tokenizer)
        # another model's vectors in the store: said in the log, documents wait (embedding_guard.py)
        embedding = EmbeddingGuard(store, models, pipeline.gate, settings, kb)
        await embedding.refresh()
        communities = CommunitySummaries(store, models, pipeline, settings)
        retriever = Retriever(store, models, settings, tokenizer, reranker)
        model_info = ModelInfoCache(upstream, settings.discovery_timeout)
        async with anyio.create_task_group() as group:
            # entity linking's name index: built before serving a small store, beside it for a big one
            # (seconds at 100k entities; until then turns are grounded without links)
            if store.vector_count("entities") <= NAMES_BEFORE_SERVING:
                await anyio.to_thread.run_sync(store.names.build_sync)
            else:
                group.start_soon(anyio.to_thread.run_sync, store.names.build_sync)
            await pipeline.start(group)
            traces.start(group)
            cache.start(group)
            group.start_soon(_save_periodically, store, settings.index_save_seconds)
            group.start_soon(store.replicas.forever)   # other replicas' commits, on a shared store
            group.start_soon(communities.run)   # when GRAPHGATE_COMMUNITY_SUMMARIES is on; idle time only
            group.start_soon(embedding.follow)
            if settings.inbox_dir is not None:
                group.start_soon(watch_inbox, settings.inbox_dir, pipeline, settings)
            try:
                knowledge = Knowledge(store=store, models=models, pipeline=pipeline, tokenizer=tokenizer,
                                      retriever=retriever, model_info=model_info, group=group, traces=traces,
                                      cache=cache,
                                      graph=GraphService.build(store, pipeline.integrator,
                                                               pipeline.merger.exclusive),
                                      documents=DocumentService(store, pipeline, communities.snapshot),
                                      communities=communities, embedding=embedding, metrics=metrics, kb=kb)
                # merge suggestions take seconds on a big graph: have them ready before anyone asks
                knowledge.graph.refresh_suggestions(settings.suggest_threshold)
                retriever.remember = knowledge.remember
                retriever.spawn = group.start_soon   # keyword calls that outlive their turn finish here
                yield knowledge
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if reranker is not None:
                await reranker.aclose()
            await store.close()
