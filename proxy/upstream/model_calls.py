"""GraphGate's own calls to the upstream models: structured chat and embeddings.

Every call takes a slot from a priority limiter shared with ingestion (one for the chat model, one
for the embedding model), is retried with backoff when the
failure is transient (unreachable, timeout, 5xx), and structured replies are looked up in and
offered to the LLM cache. Embedding vectors are checked against the dimension the store holds.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import numpy as np

from proxy.core.errors import (
    Conflict,
    GraphGateError,
    UpstreamError,
    UpstreamShapeError,
    UpstreamStatusError,
    first_error,
)
from proxy.core.limiter import Priority, PriorityLimiter
from proxy.core.llm_cache import CacheEntry
from proxy.core.settings_sections import UpstreamSettings
from proxy.monitoring.metrics import Metrics, upstream_call
from proxy.upstream.client import Upstream, json_kind

log = logging.getLogger("graphgate.models")
T = TypeVar("T")


class NoChatModel(GraphGateError):
    status = 503


class EmbeddingDimensionError(Conflict):
    pass


@dataclass(frozen=True)
class StructuredReply:
    content: str
    entry: CacheEntry    # what to store in the LLM cache (already there when ``cached``)
    cached: bool


def is_transient(error: Exception) -> bool:
    if isinstance(error, UpstreamStatusError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, UpstreamError) and not isinstance(error, UpstreamShapeError)


def cache_key(model: str, payload: Any) -> str:
    return hashlib.sha256(json.dumps([model, payload], sort_keys=True, ensure_ascii=False).encode()).hexdigest()


CacheLookup = Callable[[str, str], Awaitable[str | None]]


async def first_chat_model(entries: Any, capabilities: Callable[[str], Awaitable[Sequence[str]]]) -> str | None:
    """The extraction model when GRAPHGATE_LLM_MODEL is unset: the first model /api/tags lists with
    the ``completion`` capability (an entry that does not carry its capabilities, as Ollama's do
    not, is asked about through ``capabilities``); None when there is none. Shared with the
    upstream watcher, so that /rag/health names the model ingestion would pick."""
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        name = entry.get("model") or entry.get("name")
        if not isinstance(name, str) or not name:
            continue
        listed = entry.get("capabilities")
        if "completion" in (listed if isinstance(listed, list) else await capabilities(name)):
            return name
    return None


class ModelClient:
    def __init__(self, upstream: Upstream, limiter: PriorityLimiter, settings: UpstreamSettings,
                 cache_lookup: CacheLookup | None = None, embed_limiter: PriorityLimiter | None = None,
                 metrics: Metrics | None = None, kb: str = "default") -> None:
        self.upstream = upstream
        self.kb = kb   # the knowledge base the calls are made for (the metrics' kb label)
        self.limiter = limiter
        # the embedding model runs beside the chat model upstream: its quick calls never queue
        # behind generations
        self.embed_limiter = embed_limiter or limiter
        self.settings = settings
        self.cache_lookup = cache_lookup
        self._chat_model: str | None = settings.llm_model
        self.expected_dim: int | None = None  # set by the store once it knows its dimension
        # the model question vectors are made with while the store's vectors come from another than
        # GRAPHGATE_EMBED_MODEL (not re-embedded yet): kept by the knowledge service's embedding guard
        self.search_model: str | None = None
        self.calls = {"chat": 0, "embed": 0}
        self.metrics = metrics   # each call to the upstream timed and counted by kind (GET /metrics)

    async def with_retries(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        tries = self.settings.llm_retries
        for attempt in range(1, tries + 1):
            try:
                return await call()
            except UpstreamError as exc:
                if attempt == tries or not is_transient(exc):
                    raise
                delay = 0.5 * 2 ** (attempt - 1)
                log.warning("%s failed (%s); try %d of %d in %.1f s", what, exc.message, attempt + 1, tries, delay)
                await anyio.sleep(delay)
        raise AssertionError("unreachable")

    @property
    def chosen_chat_model(self) -> str | None:
        """The extraction model in use once chosen (it stays for the process's life)."""
        return self._chat_model

    async def chat_model(self) -> str:
        """GRAPHGATE_LLM_MODEL, or the first upstream model with the completion capability."""
        if self._chat_model:
            return self._chat_model
        tags = await self.upstream.call_json("GET", "/api/tags", deadline=self.settings.discovery_timeout)

        async def capabilities(name: str) -> list[str]:
            show = await self.upstream.call_json("POST", "/api/show", {"model": name},
                                                 deadline=self.settings.discovery_timeout)
            found = show.get("capabilities")
            return found if isinstance(found, list) else []

        name = await first_chat_model(tags.get("models", []), capabilities)
        if name is None:
            raise NoChatModel(f"upstream Ollama at {self.upstream.url} has no chat model; pull one "
                              "(e.g. `ollama pull llama3.2`) or set GRAPHGATE_LLM_MODEL")
        self._chat_model = name
        return name

    async def structured(self, kind: str, messages: list[dict[str, Any]], schema: dict[str, Any], *,
                         priority: Priority, model: str | None = None, lookup: bool = True,
                         slot_wait: float | None = None) -> StructuredReply:
        """``lookup=False`` skips the cache read (the reply is still offered to the cache);
        ``slot_wait`` bounds the wait for an upstream slot (``Busy`` past it)."""
        model = model or await self.chat_model()
        payload = {"messages": messages, "format": schema}
        key = cache_key(model, payload)
        request = json.dumps(payload, ensure_ascii=False)
        if lookup and self.cache_lookup is not None:
            hit = await self.cache_lookup(kind, key)
            if hit is not None:
                return StructuredReply(hit, CacheEntry(kind, key, model, request, hit), cached=True)
        body = {"model": model, "messages": messages, "format": schema, "stream": False,
                "options": {"temperature": 0}}

        async def call() -> str:
            async with self.limiter.slot(priority, wait=slot_wait):
                self.calls["chat"] += 1
                with upstream_call(self.metrics, kind, self.kb):
                    reply = await self.upstream.call_json("POST", "/api/chat", body)
            return self.upstream.chat_content(reply)

        content = await self.with_retries(call, f"{kind} call to {model}")
        return StructuredReply(content, CacheEntry(kind, key, model, request, content), cached=False)

    async def embed(self, texts: Sequence[str], *, priority: Priority, model: str | None = None) -> np.ndarray:
        """One L2-normalised row per text, fetched in batches of GRAPHGATE_EMBED_BATCH, made by
        ``model`` (default: GRAPHGATE_EMBED_MODEL)."""
        size = self.settings.embed_batch
        batches = [list(texts[start:start + size]) for start in range(0, len(texts), size)]
        if not batches:
            return np.empty((0, self.expected_dim or 0), dtype=np.float32)
        if len(batches) == 1:
            return await self._embed_batch(batches[0], priority, model)
        rows: list[np.ndarray] = [np.empty(0)] * len(batches)

        async def one(i: int) -> None:
            rows[i] = await self._embed_batch(batches[i], priority, model)

        # side by side, GRAPHGATE_EMBED_CONCURRENCY at a time: a merge embeds a thousand texts or more
        try:
            async with anyio.create_task_group() as group:
                for i in range(len(batches)):
                    group.start_soon(one, i)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        return np.vstack(rows)

    async def embed_for_search(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors to search the store with, at a chat's priority: made by the model the stored
        vectors come from (``search_model``, until the store is re-embedded), else by
        GRAPHGATE_EMBED_MODEL."""
        return await self.embed(texts, priority=Priority.CHAT, model=self.search_model)

    async def _embed_batch(self, batch: list[str], priority: Priority, model: str | None = None) -> np.ndarray:
        model = model or self.settings.embed_model

        async def call() -> Any:
            async with self.embed_limiter.slot(priority):
                self.calls["embed"] += 1
                with upstream_call(self.metrics, "embedding", self.kb):
                    return await self.upstream.call_json("POST", "/api/embed", {"model": model, "input": batch})

        reply = await self.with_retries(call, f"embedding call to {model}")
        embeddings = reply.get("embeddings")
        if not isinstance(embeddings, list) or not all(isinstance(row, list) for row in embeddings):
            raise self.upstream.wrong_shape("/api/embed", f"its embeddings are {json_kind(embeddings)}, "
                                                          "not a list of vectors")
        try:
            vectors = np.asarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError) as exc:  # nulls, strings, rows of different lengths
            raise UpstreamStatusError(f"embedding model {model} returned vectors that are not lists of numbers",
                                      status=502) from exc
        if vectors.ndim != 2 or vectors.shape[0] != len(batch):
            raise UpstreamStatusError(f"embedding model {model} returned {len(embeddings)} "
                                      f"vectors for {len(batch)} texts", status=502)
        if not np.isfinite(vectors).all():
            raise UpstreamStatusError(f"embedding model {model} returned vectors with NaN or infinite values",
                                      status=502)
        self.check_dimension(vectors.shape[1], model)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    def check_dimension(self, dim: int, model: str | None = None) -> None:
        if self.expected_dim is None:
            self.expected_dim = dim  # the store records it with the first commit of vectors
        elif dim != self.expected_dim:
            raise EmbeddingDimensionError(
                f"embedding model {model or self.settings.embed_model} returns {dim}-dimensional vectors but the store "
                f"holds {self.expected_dim}-dimensional ones; run `graphgate reindex` to re-embed everything "
                "with the new model")
