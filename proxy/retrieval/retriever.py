"""One retrieval, LightRAG's modes:

    local   low-level keywords -> entity index -> the entities' edges, most central first
    global  high-level keywords -> relation index -> their endpoint entities
    hybrid  both, merged round-robin without duplicates
    mix     hybrid plus the raw question against the chunk index (the default)
    naive   the chunk index only

Chunks for entities and relations come from their source chunks (by similarity to the question,
or by weighted polling); the vector, entity and relation chunk lists are merged round-robin.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import numpy as np

from proxy.core.limiter import Priority
from proxy.upstream.model_calls import CacheEntry, ModelClient
from proxy.core.settings import Settings
from proxy.store.store import KnowledgeStore
from proxy.core.tokens import Tokenizer
from proxy.retrieval import search
from proxy.retrieval.budget import Budget
from proxy.retrieval.context import Context, build_context
from proxy.retrieval.keywords import Keywords, extract_keywords, fallback
from proxy.retrieval.params import QueryParams
from proxy.retrieval.search import FoundChunk, FoundEntity, FoundRelation
from proxy.retrieval.select import by_similarity, cosine_to, rank_relations, round_robin, weighted_quota


@dataclass
class Retrieval:
    query: str
    mode: str
    keywords: Keywords | None
    context: Context | None
    timings: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None          # why nothing is injected, when nothing is

    @property
    def empty(self) -> bool:
        return self.context is None or not (self.context.entities or self.context.relations or self.context.chunks)


def scored(matches: list[tuple[int, float]], rows: dict[int, Any]) -> list[Any]:
    """The rows of the vector matches, in match order, each with its similarity."""
    found = []
    for key, score in matches:
        if key in rows:
            rows[key].score = score
            found.append(rows[key])
    return found


class Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round((time.perf_counter() - start) * 1000, 2)


class Retriever:
    def __init__(self, store: KnowledgeStore, models: ModelClient, settings: Settings, tokenizer: Tokenizer) -> None:
        self.store = store
        self.models = models
        self.settings = settings
        self.tokenizer = tokenizer
        self.remember: Callable[[CacheEntry], None] = lambda entry: None  # offers new entries to the LLM cache

    async def keywords(self, query: str, history: list[tuple[str, str]], params: QueryParams) -> Keywords | None:
        if params.hl_keywords is not None or params.ll_keywords is not None:
            found = Keywords(params.hl_keywords or (), params.ll_keywords or (), "given")
        elif params.keywords == "off":
            return Keywords((), (), "off")
        else:
            turns = history[-2 * self.settings.history_turns:] if self.settings.history_turns else []
            found = await extract_keywords(self.models, query, turns, self.settings.keyword_model,
                                           self.settings.keyword_wait)
            if found.from_question:
                return found
            if found.entry is not None:
                self.remember(found.entry)
        return fallback(found, query)

    async def retrieve(self, query: str, history: list[tuple[str, str]], params: QueryParams,
                       budget: Budget) -> Retrieval:
        timer = Timer()
        start = time.perf_counter()
        if params.mode == "bypass":
            return Retrieval(query, params.mode, None, None, skipped="bypass mode")
        keywords = None
        if params.mode != "naive":
            with timer.step("keywords"):
                keywords = await self.keywords(query, history, params)
            if keywords is None:
                return Retrieval(query, params.mode, None, None, timer.timings, skipped="no keywords in a long question")
        with timer.step("embedding"):
            vectors = await self._embed(query, keywords, params)
        context = await anyio.to_thread.run_sync(self._search_and_build, vectors, params, budget,
                                                 timer)
        timer.timings["total"] = round((time.perf_counter() - start) * 1000, 2)
        return Retrieval(query, params.mode, keywords, context, timer.timings)

    async def _embed(self, query: str, keywords: Keywords | None, params: QueryParams) -> dict[str, np.ndarray]:
        texts: dict[str, str] = {"query": query}
        if keywords is not None and not keywords.from_question:
            if keywords.low:
                texts["low"] = ", ".join(keywords.low)
            if keywords.high:
                texts["high"] = ", ".join(keywords.high)
        rows = await self.models.embed(list(texts.values()), priority=Priority.CHAT)
        vectors = dict(zip(texts, rows, strict=True))
        if keywords is not None and keywords.from_question:  # the question stands in for both lists
            vectors["low"] = vectors["high"] = vectors["query"]
        return vectors

    # --- everything below runs in a worker thread ---

    def _search_and_build(self, vectors: dict[str, np.ndarray], params: QueryParams, budget: Budget,
                          timer: Timer) -> Context:
        entities: list[FoundEntity] = []
        relations: list[FoundRelation] = []
        with timer.step("graph"):
            if params.mode in ("local", "hybrid", "mix") and "low" in vectors:
                local = self._local(vectors["low"], params)
            else:
                local = ([], [])
            if params.mode in ("global", "hybrid", "mix") and "high" in vectors:
                global_ = self._global(vectors["high"], params)
            else:
                global_ = ([], [])
            entities = round_robin([local[0], global_[0]], key=lambda e: e.key)
            relations = round_robin([local[1], global_[1]], key=lambda r: r.pair)
            self._read(search.fill_descriptions, entities, relations)
        with timer.step("chunks"):
            chunks = self._chunks(vectors["query"], entities, relations, params)
        with timer.step("context"):
            return build_context(entities, relations, chunks, entity_budget=budget.entity,
                                 relation_budget=budget.relation, total_budget=budget.total,
                                 tokenizer=self.tokenizer, instructions=params.instructions)

    def _read(self, fn: Any, *args: Any) -> Any:
        return self.store.db.read_sync(fn, *args)

    def _local(self, vector: np.ndarray, params: QueryParams) -> tuple[list[FoundEntity], list[FoundRelation]]:
        matches = search.vector_search(self.store, "entities", vector, params.top_k, params.cosine_threshold)
        entities = scored(matches, search.entities_by_keys(self.store, [k for k, _ in matches]))
        degree = search.degrees(self.store, [e.key for e in entities])
        for entity in entities:
            entity.degree = degree[entity.key]
        pairs = search.incident_pairs(self.store, [e.key for e in entities])
        related = list(search.relations_by_pairs(self.store, pairs).values())
        self._set_degrees(related)
        return entities, rank_relations(related, lambda r: r.degree, lambda r: r.weight)[:params.top_k]

    def _global(self, vector: np.ndarray, params: QueryParams) -> tuple[list[FoundEntity], list[FoundRelation]]:
        matches = search.vector_search(self.store, "relations", vector, params.top_k, params.cosine_threshold)
        relations = scored(matches, search.relations_by_keys(self.store, [k for k, _ in matches]))
        self._set_degrees(relations)
        relations = rank_relations(relations, lambda r: r.degree, lambda r: r.weight)
        endpoint_keys = list(dict.fromkeys(k for r in relations for k in (r.source, r.target)))
        found = search.entities_by_name(self.store, endpoint_keys)
        degree = search.degrees(self.store, list(found))
        entities = []
        for key in endpoint_keys:
            if key in found:
                found[key].degree = degree[key]
                entities.append(found[key])
        return entities, relations

    def _set_degrees(self, relations: list[FoundRelation]) -> None:
        degree = search.degrees(self.store, list({k for r in relations for k in (r.source, r.target)}))
        for relation in relations:
            relation.degree = degree.get(relation.source, 0) + degree.get(relation.target, 0)

    def _chunks(self, query_vector: np.ndarray, entities: list[FoundEntity], relations: list[FoundRelation],
                params: QueryParams) -> list[FoundChunk]:
        vector_ids: list[tuple[str, float]] = []
        if params.mode in ("mix", "naive"):
            matches = search.vector_search(self.store, "chunks", query_vector, params.chunk_top_k,
                                           params.cosine_threshold)
            ids = search.chunk_ids(self.store, [k for k, _ in matches])
            vector_ids = [(ids[k], score) for k, score in matches if k in ids]
        entity_ids = self._pick([e.source_ids for e in entities], query_vector, params, set())
        relation_ids = self._pick([r.source_ids for r in relations], query_vector, params, set(entity_ids))
        merged = round_robin([[(i, s, "vector") for i, s in vector_ids], [(i, 0.0, "entity") for i in entity_ids],
                              [(i, 0.0, "relation") for i in relation_ids]], key=lambda c: c[0])[:params.chunk_top_k]
        keys = search.chunk_keys(self.store, [c[0] for c in merged])
        texts = self._read(search.chunk_texts, list(keys.values()))
        documents = search.documents_of(self.store, [c[0] for c in merged])
        return [FoundChunk(i, texts[i][0], texts[i][1], score, origin, documents.get(i, []))
                for i, score, origin in merged if i in texts]

    def _pick(self, sources: list[list[str]], query_vector: np.ndarray, params: QueryParams,
              taken: set[str]) -> list[str]:
        sources = [[c for c in ids if c not in taken] for ids in sources]
        if not any(sources):
            return []
        if params.chunk_selection == "weight":
            return weighted_quota(sources, params.related_chunks)
        candidates = list(dict.fromkeys(c for ids in sources for c in ids))
        keys = search.chunk_keys(self.store, candidates)
        present = [c for c in candidates if c in keys]
        vectors = search.chunk_vectors(self.store, [keys[c] for c in present])
        if vectors.shape[0] != len(present):  # index out of step: fall back to weighted polling
            return weighted_quota(sources, params.related_chunks)
        similarity = dict(zip(present, cosine_to(query_vector, vectors).tolist(), strict=True))
        return by_similarity(sources, params.related_chunks, similarity)
