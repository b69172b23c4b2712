"""One gateway's metrics: its own registry (tests build many apps in one process, so never the
global one), the event metrics recorded as things happen, and the knowledge gauges read at scrape.

Events are recorded from few places, each once per event, with the label children resolved
here in advance (a chat turn pays a few microseconds):
- a finished trace (``observe_trace``, from ``Knowledge.record``): the turn augmented or skipped,
  and the retrieval's timings as query latency per mode and stage;
- an upstream call (``upstream_call``): the relayed chat (proxy/gateway/chat.py) and GraphGate's
  own calls (proxy/upstream/model_calls.py);
- a chat turn handed to the upstream (``chat_forwarded``): the time the gateway added first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from proxy.monitoring.knowledge_gauges import KnowledgeGauges, KnowledgeView, read_documents
from proxy.monitoring.reasons import REASONS, reason_label

CHAT_APIS = frozenset({"ollama", "openai"})   # a trace's api for a chat turn (else /rag/query, the playground, ...)

# the retriever's timing names (proxy/retrieval/retriever.py, ``Timer.step``) -> the stage counted
# ("graph" is the channels' searches but entity linking, which is its own step; "filter" finds a
# metadata filter's scope)
STAGES: Mapping[str, str] = {
    "filter": "filter",
    "linking": "linking",
    "embedding": "embedding", "keyword embedding": "embedding",
    "keywords": "keywords",
    "graph": "search", "keyword search": "search",
    "fusion": "fusion",
    "chunks": "chunks",
    "rerank": "rerank",
    "context": "context",
}
STAGE_NAMES = tuple(dict.fromkeys(STAGES.values()))
# GraphGate's own call kinds (``ModelClient.structured``'s ``kind``) as labelled
KIND_NAMES: Mapping[str, str] = {"extract": "extraction", "community": "community_summary"}
KINDS = ("chat_relay", "extraction", "summary", "keywords", "community_summary", "embedding")

QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # 2 s: an alert's bound
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
RERANK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)   # 500 ms: an alert's bound
UPSTREAM_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class TraceView(Protocol):
    """What is read of a finished trace (``proxy.store.protocols.traces.Trace``)."""

    @property
    def api(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def augmented(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def detail(self) -> dict[str, Any]: ...


class UpstreamCall:
    """One upstream call timed and counted; an error when it raises or ``status`` is >= 400
    (a cancellation, e.g. a client gone, is not the upstream's error)."""

    __slots__ = ("_calls", "_errors", "_seconds", "_started", "status")

    def __init__(self, calls: Counter, errors: Counter, seconds: Histogram) -> None:
        self._calls, self._errors, self._seconds = calls, errors, seconds
        self._started = 0.0
        self.status = 0

    def __enter__(self) -> UpstreamCall:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._seconds.observe(time.perf_counter() - self._started)
        self._calls.inc()
        if (kind is not None and issubclass(kind, Exception)) or self.status >= 400:
            self._errors.inc()


class Metrics:
    def __init__(self, knowledge: Callable[[], KnowledgeView | None]) -> None:
        """``knowledge``: the knowledge service when the store is open (read at scrape time)."""
        self.registry = CollectorRegistry()
        self.gauges = KnowledgeGauges(knowledge)
        self.registry.register(self.gauges)
        query = Histogram("graphgate_query_duration_seconds", "Retrieval latency per mode (chat turns and "
                          "/rag/query).", ["mode"], registry=self.registry,
                          buckets=QUERY_BUCKETS)
        stage = Histogram("graphgate_query_stage_duration_seconds", "Retrieval latency per mode and stage.",
                          ["mode", "stage"], registry=self.registry, buckets=STAGE_BUCKETS)
        self.rerank = Histogram("graphgate_rerank_duration_seconds", "Re-ranking latency (a re-ranking server is "
                                "set).", registry=self.registry, buckets=RERANK_BUCKETS)
        # a mode's series appear with its first retrieval: most gateways use one or two, and each
        # mode's histograms are over a hundred lines every scrape renders
        self.query: dict[str, Histogram] = {}
        self.stages: dict[str, dict[str, Histogram]] = {}
        self._query_family, self._stage_family = query, stage
        self.augmented = Counter("graphgate_chat_turns_augmented_total", "Chat turns sent upstream with "
                                 "context from the knowledge base.", registry=self.registry)
        skipped = Counter("graphgate_chat_turns_skipped_total", "Chat turns forwarded without context, by why.",
                          ["reason"], registry=self.registry)
        self.skipped = {reason: skipped.labels(reason) for reason in REASONS}
        self.added = Histogram("graphgate_chat_added_ttfb_seconds", "Time the gateway spends on a chat turn before "
                               "it goes upstream (body checks, grounding): what it adds to the time to first "
                               "byte.", registry=self.registry, buckets=ADDED_BUCKETS)
        calls = Counter("graphgate_upstream_requests_total", "Calls to the upstream by kind.", ["kind"],
                        registry=self.registry)
        errors = Counter("graphgate_upstream_errors_total", "Upstream calls that failed or got an error status, "
                         "by kind.", ["kind"], registry=self.registry)
        seconds = Histogram("graphgate_upstream_request_duration_seconds", "Upstream call latency by kind (a "
                            "relayed chat: until the upstream's response headers).", ["kind"],
                            registry=self.registry, buckets=UPSTREAM_BUCKETS)
        self._upstream_families = (calls, errors, seconds)
        self.upstream = {kind: (calls.labels(kind), errors.labels(kind), seconds.labels(kind)) for kind in KINDS}

    # --- events ---

    def observe_trace(self, trace: TraceView) -> None:
        """A finished trace: the chat turn's outcome, and the retrieval's timings if it ran."""
        if trace.api in CHAT_APIS:
            if trace.augmented:
                self.augmented.inc()
            else:
                self.skipped[reason_label(trace.reason)].inc()
        timings = trace.detail.get("timings")
        if timings:
            self.observe_timings(trace.mode, timings)

    def observe_timings(self, mode: str, timings: Mapping[str, float]) -> None:
        """A retrieval's timings (milliseconds per step, proxy/retrieval/retriever.py)."""
        stages = self.stages.get(mode)
        if stages is None:   # the mode's first retrieval
            stages = self.stages[mode] = {name: self._stage_family.labels(mode, name) for name in STAGE_NAMES}
            self.query[mode] = self._query_family.labels(mode)
        spent: dict[str, float] = {}
        for step, ms in timings.items():
            name = STAGES.get(step)
            if name is not None:
                spent[name] = spent.get(name, 0.0) + ms
        for name, ms in spent.items():
            stages[name].observe(ms / 1000)
        if "rerank" in spent:
            self.rerank.observe(spent["rerank"] / 1000)
        total = timings.get("total")
        if total is not None:   # a retrieval that ran to its context (one ended early is no query latency)
            self.query[mode].observe(total / 1000)

    def upstream_call(self, kind: str) -> UpstreamCall:
        """Time and count one upstream call: ``with metrics.upstream_call("embedding"): ...``."""
        kind = KIND_NAMES.get(kind, kind)
        children = self.upstream.get(kind)
        if children is None:
            calls, errors, seconds = self._upstream_families
            children = self.upstream[kind] = (calls.labels(kind), errors.labels(kind), seconds.labels(kind))
        return UpstreamCall(*children)

    def chat_forwarded(self, started: float) -> None:
        """A chat turn goes upstream; ``started``: ``time.perf_counter()`` when the gateway took it."""
        self.added.observe(time.perf_counter() - started)

    # --- the scrape ---

    async def render(self) -> bytes:
        """The Prometheus text: the documents read first (off the event loop), then every collector."""
        knowledge = self.gauges.knowledge()
        self.gauges.documents = await read_documents(knowledge) if knowledge is not None else None
        return generate_latest(self.registry)   # no await from the read to here: one scrape's numbers


def upstream_call(metrics: Metrics | None, kind: str) -> AbstractContextManager[Any]:
    """``metrics.upstream_call(kind)``, or nothing to record for a caller without metrics (the CLI's
    own store, ``graphgate reindex``)."""
    return nullcontext() if metrics is None else metrics.upstream_call(kind)
