"""The knowledge base's numbers, read when Prometheus scrapes (a custom Collector).

Counts come from memory: the vector indexes' sizes (what retrieval can find), the pipeline's
queues and the model limiters' slots. Documents by status and the index freshness need the
documents table; the /metrics handler reads them (``read_documents``, a few small statements in
a worker thread) just before the registry is rendered, so ``collect`` itself never blocks.
Without a store (it could not be opened) only ``graphgate_store_up 0`` is given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sized
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


class KnowledgeGauges(Collector):
    def __init__(self, knowledge: Callable[[], KnowledgeView | None]) -> None:
        self.knowledge = knowledge
        self.documents: DocumentNumbers | None = None   # the handler's read for the scrape under way

    def describe(self) -> list[Any]:
        return []   # names vary with the store's presence; nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        knowledge = self.knowledge()
        yield GaugeMetricFamily("graphgate_store_up", "1 when the knowledge store is open, 0 when it could not be "
                                "opened (the gateway then proxies without grounding).",
                                value=int(knowledge is not None))
        if knowledge is None:
            return
        store = knowledge.store
        for table, help_text in (("chunks", "Text chunks retrieval can find."),
                                 ("entities", "Entities in the graph's vector index."),
                                 ("relations", "Relations in the graph's vector index.")):
            yield GaugeMetricFamily(f"graphgate_{table}", help_text, value=store.vector_count(table))
        if self.documents is not None:
            documents = GaugeMetricFamily("graphgate_documents", "Documents by status.", labels=["status"])
            for status, count in self.documents.by_status.items():
                documents.add_metric([status], count)
            yield documents
            yield GaugeMetricFamily("graphgate_index_freshness_seconds",
                                    "Age of the oldest acknowledged document not yet searchable (pending or "
                                    "processing); 0 when every document is.", value=self.documents.freshness)
        pipeline = knowledge.pipeline
        queue = GaugeMetricFamily("graphgate_pipeline_documents", "Documents in the ingest pipeline: queued (waiting "
                                  "for a worker), extracting, merging.", labels=["state"])
        for state, held in (("queued", pipeline.queued), ("extracting", pipeline.running),
                            ("merging", pipeline.merging)):
            queue.add_metric([state], len(held))
        yield queue
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
