"""One gateway's metrics: its own registry (tests build many apps in one process, so never the
global one), the event metrics recorded as things happen, and the knowledge gauges read at scrape.

Events are recorded from few places, each once per event, with the label children resolved
here in advance (a chat turn pays a few microseconds):
- a finished trace (``observe_trace``, from ``Knowledge.record``): the turn augmented or skipped,
  and the retrieval's timings as query latency per mode and stage;
- an upstream call (``upstream_call``): the relayed chat (proxy/gateway/chat.py) and GraphGate's
  own calls (proxy/upstream/model_calls.py);
- a chat turn handed to the upstream (``chat_forwarded``): the time the gateway added first.

What belongs to a knowledge base carries its name as the ``kb`` label: the retrieval latencies, the
turns augmented or skipped, the upstream calls (GraphGate's own are made for a base's ingestion or
retrieval; a relayed chat counts for the base it is grounded in, ``default`` until knowledge models
pick another), and the knowledge gauges of every open base (a scrape opens none).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, Metric, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from proxy.monitoring.knowledge_gauges import KnowledgeGauges, KnowledgeView, read_all_documents
from proxy.monitoring.reasons import REASONS, reason_label

CHAT_APIS = frozenset({"ollama", "openai"})   # a trace's api for a chat turn (else /rag/query, the playground, ...)

# the retriever's timing names (proxy/retrieval/retriever.py, ``Timer.step``) -> the stage counted
# ("graph" is the channels' searches but entity linking, which is its own step; "filter" finds a
# metadata filter's scope)
STAGES: Mapping[str, str] = {
    "filter": "filter",
    "queued": "queued",   # waiting for a retrieval thread (GRAPHGATE_RETRIEVAL_THREADS)
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
DEFAULT_KB = "default"   # its series are there from the start (a counter at 0 says "nothing yet")

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


# The upstream a call went to, its metrics' ``upstream`` label: set by the pool of several
# upstreams (proxy/upstream/pool.py) when it picks one, in the calling task's own context (an
# awaited call shares it), so that the call's ``UpstreamCall`` reads it at its end. Never set with
# one upstream: its calls are labelled with its URL.
SERVED_BY: ContextVar[str | None] = ContextVar("graphgate_upstream_served_by", default=None)


class UpstreamCall:
    """One upstream call timed and counted; an error when it raises or ``status`` is >= 400
    (a cancellation, e.g. a client gone, is not the upstream's error)."""

    __slots__ = ("_metrics", "_kind", "_kb", "_started", "status")

    def __init__(self, metrics: Metrics, kind: str, kb: str) -> None:
        self._metrics, self._kind, self._kb = metrics, kind, kb
        self._started = 0.0
        self.status = 0

    def __enter__(self) -> UpstreamCall:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        spent = time.perf_counter() - self._started
        calls, errors, seconds = self._metrics.upstream_children(self._kind, self._kb, SERVED_BY.get())
        seconds.observe(spent)
        calls.inc()
        if (kind is not None and issubclass(kind, Exception)) or self.status >= 400:
            errors.inc()


class UpstreamGauges:
    """Each upstream by its URL (without credentials), read at scrape time: whether it is up (as
    last seen; none until it was checked) and, with several upstreams, its requests in flight, the
    requests sent to it and the connections to it that failed (the per-call series carry the
    ``upstream`` label too, through ``SERVED_BY``)."""

    def __init__(self, upstreams: Callable[[], Sequence[Mapping[str, Any]]]) -> None:
        self.upstreams = upstreams

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("graphgate_upstream_up", "1 when the upstream answered its last check or "
                               "request, 0 when it could not be reached.", labels=["upstream"])
        flight = GaugeMetricFamily("graphgate_upstream_in_flight", "Requests an upstream is answering now "
                                   "(several upstreams).", labels=["upstream"])
        sent = CounterMetricFamily("graphgate_upstream_routed", "Requests sent to an upstream (several "
                                   "upstreams).", labels=["upstream"])
        failed = CounterMetricFamily("graphgate_upstream_connect_failures", "Connections to an upstream that "
                                     "failed (several upstreams).", labels=["upstream"])
        for member in self.upstreams():
            if member.get("reachable") is not None:
                up.add_metric([member["url"]], 1.0 if member["reachable"] else 0.0)
            if member.get("in_flight") is not None:
                flight.add_metric([member["url"]], member["in_flight"])
                sent.add_metric([member["url"]], member["requests"])
                failed.add_metric([member["url"]], member["failures"])
        yield from (up, flight, sent, failed)


class Metrics:
    def __init__(self, knowledge: Callable[[], Sequence[tuple[str, KnowledgeView | None]]], *,
                 upstreams: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
                 upstream_urls: Sequence[str] = ("",)) -> None:
        """``knowledge``: the open knowledge bases' services by name, ``default`` first (None when its
        store could not be opened), read at scrape time; ``upstreams``: each upstream's state
        (``UpstreamWatcher.members``), read at scrape time; ``upstream_urls``: the upstreams' URLs
        without credentials (the ``upstream`` label; the first is a call's when none was named)."""
        self.registry = CollectorRegistry()
        self.gauges = KnowledgeGauges(knowledge)
        self.registry.register(self.gauges)
        if upstreams is not None:
            self.registry.register(UpstreamGauges(upstreams))
        query = Histogram("graphgate_query_duration_seconds", "Retrieval latency per knowledge base and mode (chat "
                          "turns and /rag/query).", ["kb", "mode"], registry=self.registry,
                          buckets=QUERY_BUCKETS)
        stage = Histogram("graphgate_query_stage_duration_seconds", "Retrieval latency per knowledge base, mode "
                          "and stage.", ["kb", "mode", "stage"], registry=self.registry, buckets=STAGE_BUCKETS)
        self.rerank = Histogram("graphgate_rerank_duration_seconds", "Re-ranking latency (a re-ranking server is "
                                "set).", registry=self.registry, buckets=RERANK_BUCKETS)
        # a (base, mode)'s series appear with its first retrieval: most gateways use one or two modes,
        # and each one's histograms are over a hundred lines every scrape renders
        self.query: dict[tuple[str, str], Histogram] = {}
        self.stages: dict[tuple[str, str], dict[str, Histogram]] = {}
        self._query_family, self._stage_family = query, stage
        self._augmented_family = Counter("graphgate_chat_turns_augmented_total", "Chat turns sent upstream with "
                                         "context from the knowledge base.", ["kb"], registry=self.registry)
        self._skipped_family = Counter("graphgate_chat_turns_skipped_total", "Chat turns forwarded without "
                                       "context, by why.", ["kb", "reason"], registry=self.registry)
        self.turns: dict[str, tuple[Counter, dict[str, Counter]]] = {}   # per base: augmented, skipped by reason
        self._turns_of(DEFAULT_KB)
        self.added = Histogram("graphgate_chat_added_ttfb_seconds", "Time the gateway spends on a chat turn before "
                               "it goes upstream (body checks, grounding): what it adds to the time to first "
                               "byte.", registry=self.registry, buckets=ADDED_BUCKETS)
        calls = Counter("graphgate_upstream_requests_total", "Calls to the upstream by kind, the knowledge base "
                        "they are made for and the upstream they went to.", ["kind", "kb", "upstream"],
                        registry=self.registry)
        errors = Counter("graphgate_upstream_errors_total", "Upstream calls that failed or got an error status, "
                         "by kind, knowledge base and upstream.", ["kind", "kb", "upstream"], registry=self.registry)
        seconds = Histogram("graphgate_upstream_request_duration_seconds", "Upstream call latency by kind, "
                            "knowledge base and upstream (a relayed chat: until the upstream's response headers).",
                            ["kind", "kb", "upstream"], registry=self.registry, buckets=UPSTREAM_BUCKETS)
        self._upstream_families = (calls, errors, seconds)
        self.default_upstream = upstream_urls[0]
        self.upstream: dict[tuple[str, str, str], tuple[Counter, Counter, Histogram]] = {}
        for url in upstream_urls:
            for kind in KINDS:
                self.upstream_children(kind, DEFAULT_KB, url)

    def _turns_of(self, kb: str) -> tuple[Counter, dict[str, Counter]]:
        turns = self.turns.get(kb)
        if turns is None:   # the base's first turn: its children resolved once
            turns = self.turns[kb] = (self._augmented_family.labels(kb),
                                      {reason: self._skipped_family.labels(kb, reason) for reason in REASONS})
        return turns

    # --- events ---

    def observe_trace(self, trace: TraceView, kb: str = DEFAULT_KB) -> None:
        """A finished trace of the knowledge base ``kb``: the chat turn's outcome, and the retrieval's
        timings if it ran."""
        if trace.api in CHAT_APIS:
            augmented, skipped = self._turns_of(kb)
            if trace.augmented:
                augmented.inc()
            else:
                skipped[reason_label(trace.reason)].inc()
        timings = trace.detail.get("timings")
        if timings:
            self.observe_timings(trace.mode, timings, kb)

    def observe_timings(self, mode: str, timings: Mapping[str, float], kb: str = DEFAULT_KB) -> None:
        """A retrieval's timings (milliseconds per step, proxy/retrieval/retriever.py)."""
        stages = self.stages.get((kb, mode))
        if stages is None:   # the base's first retrieval in this mode
            stages = self.stages[(kb, mode)] = {name: self._stage_family.labels(kb, mode, name)
                                                for name in STAGE_NAMES}
            self.query[(kb, mode)] = self._query_family.labels(kb, mode)
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
            self.query[(kb, mode)].observe(total / 1000)

    def upstream_call(self, kind: str, kb: str = DEFAULT_KB) -> UpstreamCall:
        """Time and count one upstream call made for the knowledge base ``kb``:
        ``with metrics.upstream_call("embedding", "hr"): ...``."""
        return UpstreamCall(self, KIND_NAMES.get(kind, kind), kb)

    def upstream_children(self, kind: str, kb: str, upstream: str | None) -> tuple[Counter, Counter, Histogram]:
        """The series of calls of ``kind`` for ``kb`` to ``upstream`` (None: the one upstream)."""
        key = (kind, kb, upstream or self.default_upstream)
        children = self.upstream.get(key)
        if children is None:   # the first such call: its children resolved once
            calls, errors, seconds = self._upstream_families
            children = self.upstream[key] = (calls.labels(*key), errors.labels(*key), seconds.labels(*key))
        return children

    def forget(self, kb: str) -> None:
        """Drop a deleted knowledge base's series (a base made again under its name starts from 0,
        which Prometheus reads as a counter reset)."""
        for key in [key for key in self.query if key[0] == kb]:
            mode = key[1]
            self._query_family.remove(kb, mode)
            for stage in self.stages.pop(key):
                self._stage_family.remove(kb, mode, stage)
            del self.query[key]
        if self.turns.pop(kb, None) is not None:
            self._augmented_family.remove(kb)
            for reason in REASONS:
                self._skipped_family.remove(kb, reason)
        for labels in [labels for labels in self.upstream if labels[1] == kb]:
            for family in self._upstream_families:
                family.remove(*labels)
            del self.upstream[labels]

    def chat_forwarded(self, started: float) -> None:
        """A chat turn goes upstream; ``started``: ``time.perf_counter()`` when the gateway took it."""
        self.added.observe(time.perf_counter() - started)

    # --- the scrape ---

    async def render(self) -> bytes:
        """The Prometheus text: the open bases' documents read first (off the event loop), then every
        collector."""
        services = list(self.gauges.knowledge())
        self.gauges.documents = await read_all_documents(services)
        self.gauges.services = services   # the bases read are the bases shown, whatever opens or closes meanwhile
        try:
            return generate_latest(self.registry)   # no await from the read to here: one scrape's numbers
        finally:
            self.gauges.services = None


def upstream_call(metrics: Metrics | None, kind: str, kb: str = DEFAULT_KB) -> AbstractContextManager[Any]:
    """``metrics.upstream_call(kind, kb)``, or nothing to record for a caller without metrics (the CLI's
    own store, ``graphgate reindex``)."""
    return nullcontext() if metrics is None else metrics.upstream_call(kind, kb)
