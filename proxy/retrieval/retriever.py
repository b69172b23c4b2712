"""One retrieval, LightRAG's modes (``proxy/core/modes.py``), as a pipeline of stages
(``proxy/retrieval/stages.py``):

    keywords   one model call, unless the mode's channels search with the question alone
    embedding  the question and the keyword lists
    graph      the mode's channels (entity, relation and chunk indexes), their entities and
               relations fused (the ``fusion`` knob: round-robin or reciprocal rank), the chosen
               ones' descriptions read
    chunks     the chosen graph items' source chunks (by similarity to the question, or by
               weighted polling), every chunk list fused likewise, their texts read
    rerank     an optional async reranker's new order of the chunks (the fused one when it fails)
    context    the token-budgeted text

The blocking stages share one worker-thread call, or two when the turn awaits its keywords between
the searches that need none and those that do (and the context its own after an async reranker).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import numpy as np

from proxy.core.errors import UpstreamError
from proxy.core.language_setting import language_for
from proxy.core.modes import Mode
from proxy.core.settings_sections import RetrievalSettings
from proxy.core.tokens import Tokenizer
from proxy.retrieval.budget import Budget
from proxy.retrieval.channels import channels_for
from proxy.retrieval.context import Context, build_context
from proxy.retrieval.context_evidence import build_evidence_context
from proxy.retrieval.evidence_rank import rank_entities, rank_evidence
from proxy.retrieval.found import (
    ChunkHit,
    Found,
    FoundChunk,
    FoundCommunity,
    FoundEntity,
    FoundRelation,
)
from proxy.retrieval.fusion import fuse_chunks, fuse_graph, read_chunks
from proxy.retrieval.keywords import ArrivingKeywords, QuestionKeywords, extract_keywords, fallback
from proxy.retrieval.params import QueryParams
from proxy.retrieval.scope import Scope, ScopeCache, matching_documents
from proxy.retrieval.scoped_store import ScopedStore
from proxy.retrieval.search import fill_descriptions
from proxy.retrieval.sources import graph_sources
from proxy.retrieval.stages import KEYWORD_VECTORS, Channel, Question, Reranker
from proxy.retrieval.wording import wording_for
from proxy.store.protocols.retrieval import RetrievalReads, RetrievalSource
from proxy.text.words import content_words
from proxy.upstream.model_calls import CacheEntry, ModelClient

log = logging.getLogger("graphgate")
LINE_TOKENS = 8        # the shortest a fact or entity line of the evidence layout gets
SHORTLIST_FLOOR = 40   # relations and entities kept for the evidence ranking at the smallest budgets
SEARCH_THREADS = 4     # a shared store's channel searches at once (a turn has up to four)


@dataclass
class Retrieval:
    query: str
    mode: str
    keywords: QuestionKeywords | None
    context: Context | None
    timings: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None          # why nothing is injected, when nothing is
    rerank: str | None = None           # what the reranker did, or why its order was not used (when there is one)
    channels: dict[str, dict[str, int]] = field(default_factory=dict)   # each channel's finds, counted
    shed: str | None = None             # a stage skipped because many retrievals were in flight, and why
    filtered: dict[str, Any] | None = None  # the metadata filter and how many documents it let through
    # the model the question was embedded by, when not GRAPHGATE_EMBED_MODEL: the one the store's
    # vectors come from, until `graphgate reindex` (proxy/knowledge/embedding_guard.py)
    embedded_by: str | None = None

    @property
    def empty(self) -> bool:
        return self.context is None or not (self.context.entities or self.context.relations or self.context.chunks)


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


@dataclass
class GraphFinds:
    entities: list[FoundEntity]
    relations: list[FoundRelation]
    chunk_lists: list[list[ChunkHit]]   # the channels' own chunk hits, one list per channel that has any
    communities: list[FoundCommunity] = field(default_factory=list)
    described: int = 0   # how many leading entities a question naming none asks for (the described channel's)


class Retriever:
    def __init__(self, store: RetrievalSource, models: ModelClient, settings: RetrievalSettings, tokenizer: Tokenizer,
                 reranker: Reranker | None = None) -> None:
        self.store = store
        self.models = models
        self.settings = settings
        self.tokenizer = tokenizer
        self.reranker = reranker  # none by default: the fused order is the final one
        # starts a background task (the knowledge service's task group): keyword calls outlive a turn
        self.spawn: Callable[..., object] | None = None
        self.in_flight = 0   # retrievals under way (on the event loop: no lock needed)
        self.rerank_failure: str | None = None  # the reranker's last failure, logged once
        self.remember: Callable[[CacheEntry], None] = lambda entry: None  # offers new entries to the LLM cache
        self.scopes = ScopeCache()
        # the processed documents' (name, metadata), read once per commit and metadata edit
        self._metadata: tuple[tuple[int, int], list[tuple[str, dict[str, Any]]]] | None = None
        self._searches: ThreadPoolExecutor | None = None   # a shared store's channel searches (``_pool``)
        self._working: anyio.CapacityLimiter | None = None   # made on first use (it needs the event loop)
        self._searches_lock = threading.Lock()

    async def _in_thread(self, timer: Timer, work: Callable[..., Any], *args: Any) -> Any:
        """Run a retrieval's blocking part in a worker thread, at most ``retrieval_threads`` at
        once, the rest waiting in arrival order: under a burst of chats forty threads taking turns
        on Python's one interpreter lock made every turn slow and left the event loop, which relays
        every answer, a fortieth of the CPU. The wait is the turn's "queued" step."""
        if self._working is None:
            self._working = anyio.CapacityLimiter(self.settings.retrieval_threads)
        asked = time.perf_counter()

        def started() -> Any:
            waited = (time.perf_counter() - asked) * 1000
            timer.timings["queued"] = round(timer.timings.get("queued", 0.0) + waited, 2)
            return work(*args)
        return await anyio.to_thread.run_sync(started, limiter=self._working)

    def has_chunks(self) -> bool:
        """Whether there is anything to retrieve from (no processed document: nothing to augment with)."""
        return self.store.vector_count("chunks") > 0

    async def keywords(self, query: str, history: list[tuple[str, str]],
                       params: QueryParams) -> QuestionKeywords | None:
        if params.hl_keywords is not None or params.ll_keywords is not None:
            found = QuestionKeywords(params.hl_keywords or (), params.ll_keywords or (), "given")
        elif params.keywords == "off":
            return QuestionKeywords((), (), "off")
        else:
            turns = history[-2 * self.settings.history_turns:] if self.settings.history_turns else []
            found = await extract_keywords(self.models, query, turns, self.settings.keyword_model,
                                           self.settings.keyword_wait)
            if found.from_question:
                return found
            if found.entry is not None:
                self.remember(found.entry)
        return fallback(found, query)

    def user_turns(self, history: list[tuple[str, str]]) -> tuple[str, ...]:
        """The last ``history_turns`` user turns, oldest first (what entity linking also reads)."""
        turns = [text for role, text in history if role == "user"]
        return tuple(turns[-self.settings.history_turns:]) if self.settings.history_turns else ()

    async def retrieve(self, query: str, history: list[tuple[str, str]], params: QueryParams,
                       budget: Budget) -> Retrieval:
        self.in_flight += 1
        try:
            return await self._retrieve(query, history, params, budget)
        finally:
            self.in_flight -= 1

    def _shed(self, params: QueryParams) -> tuple[QueryParams, str | None]:
        """The light path, asked for (the ``effort`` knob) or under a burst of chats (more than
        ``burst_retrievals`` in flight): the PageRank expansion (half a retrieval's CPU on a dense
        graph) gives way to the chain walk (its chains without its rings), and the keyword call (not
        waited for anyway, and a burst keeps the model busy) and the vector reads beyond the
        searches (every turn's reads queue on the index's one lock) are shed; what remains grounds
        the turn. Under a burst, what was shed and why."""
        limit = self.settings.burst_retrievals
        burst = bool(limit) and self.in_flight > limit
        if params.effort != "light" and not burst:
            return params, None
        light: dict[str, Any] = {"expansion": self.settings.light_expansion if params.expansion != "off" else "off",
                                 "keywords": "off", "chunk_selection": "weight"}
        shed = [name if value == "off" else f"{name} ({value})" for name, value in light.items()
                if getattr(params, name) != value]
        asked = params.effort == "light"
        params = dataclasses.replace(params, **{**light, "effort": "light"})
        if asked:
            return params, None
        what = f"{', '.join(shed)} and relation vectors" if shed else "relation vectors"
        return params, f"{what} ({self.in_flight} retrievals in flight)"

    async def _retrieve(self, query: str, history: list[tuple[str, str]], params: QueryParams,
                        budget: Budget) -> Retrieval:
        timer = Timer()
        params, shed = self._shed(params)
        start = time.perf_counter()
        mode = Mode(params.mode)
        if mode is Mode.BYPASS:
            return Retrieval(query, params.mode, None, None, skipped="bypass mode")
        if not content_words(query) and not self.user_turns(history):   # "what is it?" with nothing before
            return Retrieval(query, params.mode, None, None, skipped="the question has no words to look up")
        scope, filtered = None, None
        if params.filters is not None:
            with timer.step("filter"):
                scope = await self._scope(params)
            filtered = {"filters": params.filters.text, "documents": len(scope.documents)}
            if scope.empty:   # never an error: the filter simply leaves nothing to ground the turn in
                return Retrieval(query, params.mode, None, None, timer.timings, filtered=filtered,
                                 skipped="no searchable document matches the filter")
        channels = channels_for(mode, params)
        wanted = [channel for channel in channels if channel.vector in KEYWORD_VECTORS]
        arriving = await self._start_keywords(query, history, params) if wanted else None
        with timer.step("embedding"):
            vectors = await self._embed(query, None)
        question = Question(query, params, vectors, self.user_turns(history), scope=scope)
        own = [channel for channel in channels if channel.vector not in KEYWORD_VECTORS]
        # the blocking stages run in as few worker-thread calls as the turn's awaits allow: each
        # hop back to the event loop waits behind every other turn's work under a burst of chats
        keywords = None
        if arriving is None:
            finds, graph, chunks, context = await self._in_thread(
                timer, self._blocking, question, own, channels, budget, params.effort == "full", timer)
        else:
            # given, or off (the question stands in): nothing to wait for, the searches go together
            searched = None if arriving.done.is_set() else await self._in_thread(
                timer, self._search_timed, question, own, timer)
            with timer.step("keywords"):   # only what the turn waited beyond its own searches
                keywords = await arriving.wait(start + params.keyword_budget)
            if keywords is None:
                return Retrieval(query, params.mode, None, None, timer.timings,
                                 skipped="no keywords in a long question")
            with timer.step("keyword embedding"):
                worded = Question(query, params, await self._embed(query, keywords, vectors["query"]),
                                  question.turns, keywords.high, scope)
            finds, graph, chunks, context = await self._in_thread(
                timer, self._blocking, question, own, channels, budget, params.effort == "full", timer, searched,
                (worded, wanted))
            question = worded
        rerank = None
        if self.reranker is not None:
            with timer.step("rerank"):
                chunks, rerank = await self._rerank(question, chunks)
            with timer.step("context"):
                context = await self._in_thread(timer, self._build_context, graph, chunks, params, budget,
                                                question, finds.get("linked"))
        assert context is not None
        timer.timings["total"] = round((time.perf_counter() - start) * 1000, 2)
        counted = {name: {"entities": len(f.entities), "relations": len(f.relations), "chunks": len(f.chunks),
                          "communities": len(f.communities)} for name, f in finds.items()}
        return Retrieval(query, params.mode, keywords, context, timer.timings, rerank=rerank, channels=counted,
                         shed=shed, filtered=filtered, embedded_by=self.models.search_model)

    async def _scope(self, params: QueryParams) -> Scope:
        """What the request's filter lets through: the processed documents it matches, then their
        chunks and the entities and relations those source (cached per commit)."""
        assert params.filters is not None
        version = (self.store.generation, self.store.metadata_version)   # read before the rows: never newer
        if self._metadata is None or self._metadata[0] != version:
            self._metadata = (version, await self.store.searchable_metadata())
        names = await anyio.to_thread.run_sync(matching_documents, params.filters, self._metadata[1])
        return await anyio.to_thread.run_sync(self.scopes.get, self.store, names)

    def _view(self, question: Question) -> RetrievalReads:
        """The store as this question may see it: all of it, or a filter's scope."""
        return self.store if question.scope is None else ScopedStore(self.store, question.scope)

    def _narrow(self, question: Question, relations: list[FoundRelation], chunks: list[FoundChunk]) -> None:
        """Under a filter: the relations' keywords and weights, and the documents a chunk is cited
        from (a chunk is shared by every document holding its text), only the matching documents'."""
        if question.scope is None:
            return
        ScopedStore(self.store, question.scope).narrow_relations(relations)
        for chunk in chunks:
            chunk.documents = [d for d in chunk.documents if d in question.scope.documents]

    async def _start_keywords(self, query: str, history: list[tuple[str, str]],
                              params: QueryParams) -> ArrivingKeywords:
        """The turn's keywords, arriving in the background while the searches that need none run;
        a call that outlives the turn's wait still fills the cache for the next turn that asks it."""
        if params.hl_keywords is not None or params.ll_keywords is not None or params.keywords == "off":
            return ArrivingKeywords.ready(await self.keywords(query, history, params))   # no call to wait for
        arriving = ArrivingKeywords()
        if self.spawn is None:   # no background task group (a bare retriever): the turn waits for the call
            arriving.inline = self.keywords(query, history, params)
        else:
            self.spawn(arriving.fill, self.keywords(query, history, params))
        return arriving

    async def _rerank(self, question: Question, chunks: list[FoundChunk]) -> tuple[list[FoundChunk], str]:
        """The reranker's order, or the fused one when it fails (down, slow, garbage), saying why:
        a re-ranking server is an extra, never a reason to fail the turn. A new failure is logged
        once, not on every turn."""
        assert self.reranker is not None
        if not chunks:
            return chunks, "nothing to re-rank"
        try:
            ranked = await self.reranker.rerank(question, chunks)
        except UpstreamError as exc:
            if exc.message != self.rerank_failure:
                log.warning("re-ranking failed, the fused order is kept: %s", exc.message)
            self.rerank_failure = exc.message
            return chunks, f"skipped: {exc.message}"
        self.rerank_failure = None
        return ranked, f"{len(chunks)} chunks re-ranked, {len(ranked)} kept"

    async def _embed(self, query: str, keywords: QuestionKeywords | None,
                     question_vector: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The question's vector (embedded unless given) and its keyword lists' ("low", "high")."""
        texts: dict[str, str] = {} if question_vector is not None else {"query": query}
        if keywords is not None and not keywords.from_question:
            if keywords.low:
                texts["low"] = ", ".join(keywords.low)
            if keywords.high:
                texts["high"] = ", ".join(keywords.high)
        # by the model the stored vectors come from (GRAPHGATE_EMBED_MODEL unless the store awaits a re-embedding)
        vectors = dict(zip(texts, await self.models.embed_for_search(list(texts.values())), strict=True)
                       ) if texts else {}
        if question_vector is not None:
            vectors["query"] = question_vector
        if keywords is not None and keywords.from_question:  # the question stands in for both lists
            vectors["low"] = vectors["high"] = vectors["query"]
        return vectors

    # --- the blocking stages: run in worker threads ---

    def _search_timed(self, question: Question, channels: list[Channel], timer: Timer) -> dict[str, Found]:
        """The channels' searches as the "graph" step, entity linking's time its own ("linking")."""
        with timer.step("graph"):
            finds = self._search_channels(question, channels, timer)
        if "linking" in timer.timings:
            timer.timings["graph"] = round(timer.timings["graph"] - timer.timings["linking"], 2)
        return finds

    def _blocking(self, question: Question, own: list[Channel], every: list[Channel], budget: Budget,
                  vectors: bool, timer: Timer, finds: dict[str, Found] | None = None,
                  worded: tuple[Question, list[Channel]] | None = None
                  ) -> tuple[dict[str, Found], GraphFinds, list[FoundChunk], Context | None]:
        """One worker-thread call: the ``own`` channels' searches (unless their ``finds`` are
        given), the keyword channels' with the ``worded`` question, fusion, the chunks and, without
        a reranker to await first, the context."""
        if finds is None:
            finds = self._search_timed(question, own, timer)
        if worded is not None:
            question, wanted = worded
            with timer.step("keyword search"):
                finds |= self._search_channels(question, wanted)
        with timer.step("fusion"):
            graph = self._fuse_graph(question, finds, [c.name for c in every if c.name in finds], budget, vectors)
        with timer.step("chunks"):
            chunks = self._collect_chunks(question, graph)
        if self.reranker is not None:
            return finds, graph, chunks, None
        with timer.step("context"):
            context = self._build_context(graph, chunks, question.params, budget, question, finds.get("linked"))
        return finds, graph, chunks, context

    def _search_channels(self, question: Question, channels: list[Channel],
                         timer: Timer | None = None) -> dict[str, Found]:
        """The channels whose vector the question has (no low-level keywords: no entity search).
        With ``timer``, entity linking's time is its own step ("linking"), taken out of "graph"."""
        store, scope = self._view(question), question.scope
        wanted = [channel for channel in channels if channel.vector in question.vectors]
        # on a shared store each search is a round trip to PostgreSQL: the channels go together
        # (the embedded store's searches are in memory, microseconds: no threads for them)
        parallel = self.store.shared and len(wanted) > 1
        pending = {channel.name: self._pool().submit(channel.search, store, question)
                   for channel in wanted if parallel and channel.name != "linked"}
        finds = {}
        for channel in wanted:
            if channel.name in pending:
                found = pending[channel.name].result()
            elif timer is not None and channel.name == "linked":
                with timer.step("linking"):
                    found = channel.search(store, question)
            else:
                found = channel.search(store, question)
            finds[channel.name] = found if scope is None else scope.restrict(found)
        return finds

    def _pool(self) -> ThreadPoolExecutor:
        with self._searches_lock:   # turns retrieve in several worker threads at once
            if self._searches is None:
                self._searches = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="channel-search")
            return self._searches

    def _fuse_graph(self, question: Question, named: dict[str, Found], order: list[str], budget: Budget,
                    vectors: bool = True) -> GraphFinds:
        """The channels' entities and relations as one list each (in channel ``order``), described."""
        finds = [named[name] for name in order]
        entities, relations = fuse_graph(finds, question.params.fusion)
        self._narrow(question, relations, [])
        found_by(named, order, entities, relations)
        if question.params.context_layout == "evidence":
            # ranked first by what is in memory; only a shortlist the budget could hold is read and
            # ranked again with its descriptions (a hub's hundreds of relations are not read per turn)
            anchors = {e.key: e.score for e in named["linked"].entities} if "linked" in named else {}
            relations = rank_evidence(self._view(question), question, relations, anchors,
                                      shortlist=max(SHORTLIST_FLOOR, budget.relation // LINE_TOKENS), vectors=vectors)
            described = [e.key for e in named["described"].entities] if "described" in named and not anchors else []
            entities = rank_entities(entities, relations, anchors, described
                                     )[:max(SHORTLIST_FLOOR, len(described), budget.entity // LINE_TOKENS)]
            fill_descriptions(self._view(question), entities, [])
        else:
            described = []
            fill_descriptions(self._view(question), entities, relations)
        communities = sorted((c for f in finds for c in f.communities), key=lambda c: -c.score)
        leading = len(set(described) & {e.key for e in entities})
        return GraphFinds(entities, relations, [f.chunks for f in finds if f.chunks], communities, leading)

    def _collect_chunks(self, question: Question, finds: GraphFinds) -> list[FoundChunk]:
        lists = [*finds.chunk_lists, *graph_sources(self._view(question), question, finds.entities, finds.relations)]
        chunks = read_chunks(self.store, fuse_chunks(lists, question.params.chunk_top_k, question.params.fusion))
        self._narrow(question, [], chunks)
        return chunks

    def _language(self, question: Question, linked: Found | None, finds: GraphFinds) -> str:
        """The language the context is worded in: the ``language`` setting's, or the question's,
        the names it spells of the entities it links to or that were found left out (a Chinese
        question about "Zorvel Systems" is Chinese, an English one about "奥巴尼克斯" English)."""
        asked = question.text.casefold()
        entities = [*(linked.entities if linked is not None else ()), *finds.entities]
        names = {e.name for e in entities if e.name and e.name.casefold() in asked}
        return language_for(self.settings.language, question.text, names)

    def _build_context(self, finds: GraphFinds, chunks: list[FoundChunk], params: QueryParams,
                       budget: Budget, question: Question, linked: Found | None) -> Context:
        wording = wording_for(self._language(question, linked, finds))
        if params.context_layout == "evidence":
            return build_evidence_context(finds.entities, finds.relations, chunks, entity_budget=budget.entity,
                                          relation_budget=budget.relation, total_budget=budget.total,
                                          tokenizer=self.tokenizer, instructions=params.instructions,
                                          communities=finds.communities, wording=wording, question=question.asked,
                                          named=frozenset(e.key for e in linked.entities) if linked else frozenset(),
                                          described=finds.described)
        return build_context(finds.entities, finds.relations, chunks, entity_budget=budget.entity,
                             relation_budget=budget.relation, total_budget=budget.total,
                             tokenizer=self.tokenizer, instructions=params.instructions,
                             communities=finds.communities, wording=wording)


def found_by(named: dict[str, Found], order: list[str], entities: list[FoundEntity],
             relations: list[FoundRelation]) -> None:
    """Each fused item's ``channels``: which channels found it (what the playground shows)."""
    entity_channels: dict[str, list[str]] = {}
    relation_channels: dict[str, list[str]] = {}
    for name in order:
        for e in named[name].entities:
            entity_channels.setdefault(e.key, []).append(name)
        for r in named[name].relations:
            relation_channels.setdefault(r.pair, []).append(name)
    for entity in entities:
        entity.channels = list(dict.fromkeys(entity_channels.get(entity.key, [])))
    for relation in relations:
        relation.channels = list(dict.fromkeys(relation_channels.get(relation.pair, [])))
