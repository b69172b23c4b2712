"""The knowledge bases' numbers, read when Prometheus scrapes (a custom Collector): each open
base's, labelled with its name (``kb``); a closed base is not opened by a scrape.

Counts come from memory: the vector indexes' sizes (what retrieval can find), the pipeline's
queues and the model limiters' slots. Documents by status and the index freshness need the
documents table; the /metrics handler reads them (``read_documents``, a few small statements in
a worker thread) just before the registry is rendered, so ``collect`` itself never blocks.
The embedding models come from memory too (the knowledge service's check after every commit).
Without a store (default's could not be opened) only ``graphgate_store_up{kb="default"} 0`` is given
for it. The model slots are the gateway's (the bases share them): given once, unlabelled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from proxy.core.errors import GraphGateError, first_error

log = logging.getLogger("graphgate.metrics")

STATUSES = ("pending", "processing", "processed", "failed")
NOT_SEARCHABLE = ("pending", "processing")   # acknowledged, not yet found by a chat


class StoreView(Protocol):
    def vector_count(self, table: str) -> int: ...


class LimiterView(Protocol):
    @property
    def capacity(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...


class ModelsView(Protocol):
    @property
    def limiter(self) -> LimiterView: ...
    @property
    def embed_limiter(self) -> LimiterView: ...


class PipelineView(Protocol):
    @property
    def queued(self) -> Sized: ...
    @property
    def running(self) -> Sized: ...
    @property
    def merging(self) -> Sized: ...


class DocumentsView(Protocol):
    async def page(self, *, status: str | None, search: str | None, sort: str, descending: bool, limit: int,
                   offset: int) -> tuple[list[dict[str, Any]], int]: ...


class EmbeddingView(Protocol):
    """The store's embedding models against GRAPHGATE_EMBED_MODEL (``proxy.knowledge.embedding_guard``)."""

    @property
    def configured(self) -> str: ...
    @property
    def mismatched(self) -> dict[str, str]: ...


class KnowledgeView(Protocol):
    """What the gauges read of the knowledge service (``proxy.knowledge.service.Knowledge``)."""

    @property
    def store(self) -> StoreView: ...
    @property
    def models(self) -> ModelsView: ...
    @property
    def pipeline(self) -> PipelineView: ...
    @property
    def documents(self) -> DocumentsView: ...
    @property
    def embedding(self) -> EmbeddingView: ...


@dataclass(frozen=True)
class DocumentNumbers:
    by_status: dict[str, int] = field(default_factory=dict)
    freshness: float = 0.0   # seconds since the oldest document not yet searchable was acknowledged


async def read_documents(knowledge: KnowledgeView) -> DocumentNumbers | None:
    """Documents by status, and the oldest unsearchable one's age; None when the store refuses.
    The four small reads run side by side (the tables serve reads from a pool of cursors)."""
    pages: dict[str, tuple[list[dict[str, Any]], int]] = {}

    async def read(status: str) -> None:
        pages[status] = await knowledge.documents.page(status=status, search=None, sort="created_at",
                                                       descending=False, limit=int(status in NOT_SEARCHABLE),
                                                       offset=0)

    try:
        async with anyio.create_task_group() as group:
            for status in STATUSES:
                group.start_soon(read, status)
    except BaseExceptionGroup as failed:
        error = first_error(failed)
        if not isinstance(error, (GraphGateError, OSError)):
            raise
        log.warning("metrics: could not read the documents table: %s", error)
        return None
    stamps = [datetime.fromisoformat(rows[0]["created_at"]) for rows, _ in pages.values() if rows]
    age = (datetime.now(UTC) - min(stamps)).total_seconds() if stamps else 0.0
    return DocumentNumbers({status: pages[status][1] for status in STATUSES}, max(0.0, age))


async def read_all_documents(services: Sequence[tuple[str, KnowledgeView | None]]
                             ) -> dict[str, DocumentNumbers | None]:
    """``read_documents`` of every open base, side by side."""
    numbers: dict[str, DocumentNumbers | None] = {}

    async def read(name: str, knowledge: KnowledgeView) -> None:
        numbers[name] = await read_documents(knowledge)

    async with anyio.create_task_group() as group:
        for name, knowledge in services:
            if knowledge is not None:
                group.start_soon(read, name, knowledge)
    return numbers


Services = Sequence[tuple[str, KnowledgeView | None]]


class KnowledgeGauges(Collector):
    def __init__(self, knowledge: Callable[[], Services]) -> None:
        self.knowledge = knowledge   # the open bases' services by name, default first
        self.documents: dict[str, DocumentNumbers | None] = {}   # the handler's read for the scrape under way
        self.services: Services | None = None   # the bases that read was of (None: read them now)

    def describe(self) -> list[Any]:
        return []   # names vary with the store's presence; nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        services = self.services if self.services is not None else self.knowledge()
        up = GaugeMetricFamily("graphgate_store_up", "1 when the knowledge base's store is open, 0 when it could not "
                               "be opened (the gateway then proxies without grounding).", labels=["kb"])
        for name, knowledge in services:
            up.add_metric([name], int(knowledge is not None))
        yield up
        open_bases = [(name, knowledge) for name, knowledge in services if knowledge is not None]
        if not open_bases:
            return
        for table, help_text in (("chunks", "Text chunks retrieval can find."),
                                 ("entities", "Entities in the graph's vector index."),
                                 ("relations", "Relations in the graph's vector index.")):
            family = GaugeMetricFamily(f"graphgate_{table}", help_text, labels=["kb"])
            for name, knowledge in open_bases:
                family.add_metric([name], knowledge.store.vector_count(table))
            yield family
        read = [(name, numbers) for name, _ in open_bases if (numbers := self.documents.get(name)) is not None]
        if read:
            documents = GaugeMetricFamily("graphgate_documents", "Documents by knowledge base and status.",
                                          labels=["kb", "status"])
            freshness = GaugeMetricFamily("graphgate_index_freshness_seconds",
                                          "Age of the oldest acknowledged document not yet searchable (pending or "
                                          "processing) per knowledge base; 0 when every document is.",
                                          labels=["kb"])
            for name, numbers in read:
                for status, count in numbers.by_status.items():
                    documents.add_metric([name, status], count)
                freshness.add_metric([name], numbers.freshness)
            yield documents
            yield freshness
        yield embedding_mismatch(open_bases)
        queue = GaugeMetricFamily("graphgate_pipeline_documents", "Documents in a knowledge base's ingest pipeline: "
                                  "queued (waiting for a worker), extracting, merging.", labels=["kb", "state"])
        for name, knowledge in open_bases:
            pipeline = knowledge.pipeline
            for state, held in (("queued", pipeline.queued), ("extracting", pipeline.running),
                                ("merging", pipeline.merging)):
                queue.add_metric([name, state], len(held))
        yield queue
        knowledge = open_bases[0][1]   # the slots are shared: any open base's limiters are the gateway's
        capacity = GaugeMetricFamily("graphgate_llm_slots", "Upstream calls GraphGate may run at once, per model "
                                     "(GRAPHGATE_LLM_CONCURRENCY, GRAPHGATE_EMBED_CONCURRENCY).", labels=["model"])
        busy = GaugeMetricFamily("graphgate_llm_slots_busy", "Upstream call slots in use, per model.",
                                 labels=["model"])
        waiting = GaugeMetricFamily("graphgate_llm_calls_waiting", "GraphGate's own upstream calls waiting for a "
                                    "slot, per model.", labels=["model"])
        models = knowledge.models
        for model, limiter in (("chat", models.limiter), ("embedding", models.embed_limiter)):
            capacity.add_metric([model], limiter.capacity)
            busy.add_metric([model], limiter.running)
            waiting.add_metric([model], limiter.waiting)
        yield from (capacity, busy, waiting)


def embedding_mismatch(bases: Sequence[tuple[str, KnowledgeView]]) -> GaugeMetricFamily:
    """Per base, how many vector tables hold vectors of another model than GRAPHGATE_EMBED_MODEL
    (0: none), labelled with both models: an alert fires on > 0 until `graphgate reindex` ran."""
    family = GaugeMetricFamily("graphgate_embedding_model_mismatch", "Vector tables (chunks, entities, relations, "
                               "communities) whose vectors come from another embedding model than "
                               "GRAPHGATE_EMBED_MODEL; new documents wait until `graphgate reindex` re-embeds them.",
                               labels=["kb", "configured", "stored"])
    for name, knowledge in bases:
        embedding = knowledge.embedding
        mismatched = embedding.mismatched
        stored = ",".join(sorted(set(mismatched.values()))) or embedding.configured
        family.add_metric([name, embedding.configured, stored], len(mismatched))
    return family
