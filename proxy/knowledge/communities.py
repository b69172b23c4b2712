"""Community summaries for global questions (seed 003: global = relations + community summaries).

The graph's Leiden communities (``store.communities_sync``) are each summarised by the extraction
model, embedded and committed to the store's ``communities`` table and vector index, where the
community channel (proxy/retrieval/channels/communities.py) finds them.

The job runs in the background, never in the way of documents or chats:
- it starts only when the ingestion pipeline is idle and the knowledge base changed since its last
  complete run (the store's generation); the partition runs in a worker thread, outside the
  store's lock;
- a community is identified by its sorted member keys, and its summary by a digest of what it was
  written from (the members' and their relations' vector keys: a changed description re-embeds a
  row, so its key changes). Only new or changed communities are summarised; vanished ones are
  removed. A deleted document thus updates the communities from the stored descriptions alone;
- model calls run outside any lock at the lowest priority, results are committed a few at a time
  through the store's single writer, and the run stops as soon as documents arrive (the next idle
  moment resumes it: what was committed is not summarised again);
- a failed summary is retried at a later run, with backoff, and logged once until it succeeds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread

from proxy.core import json_text
from proxy.core.errors import GraphGateError
from proxy.core.language_setting import language_for
from proxy.core.limiter import Priority
from proxy.core.llm_cache import CacheEntry
from proxy.core.settings_sections import CommunitySettings
from proxy.ingest.pipeline import Pipeline
from proxy.store.changes import Changeset, CommunityRow, pair_key
from proxy.store.store import Community, KnowledgeStore
from proxy.upstream.model_calls import ModelClient

log = logging.getLogger("graphgate.communities")

MIN_MEMBERS = 2          # a lone entity is already its own description
MAX_MEMBERS = 40         # a larger community is split again (one theme per summary)
PROMPT_MEMBERS = 25      # members described in a prompt, most central first; the rest are named only
NAMED_MEMBERS = 60       # members named at all in a prompt
PROMPT_RELATIONS = 30    # relations among the described members in a prompt, heaviest first
DESCRIPTION_CHARS = 300  # of each description in a prompt
BATCH = 8                # summaries committed together
PLAN_BATCH = 1000        # communities planned per hold of the store's memory lock
RETRY_SECONDS = 30.0     # first wait before a failed summary is tried again; doubled each time
RETRY_MAX_SECONDS = 3600.0

SCHEMA: dict[str, Any] = {"type": "object",
                          "properties": {"title": {"type": "string"}, "summary": {"type": "string"}},
                          "required": ["title", "summary"]}


@dataclass
class Planned:
    """One community as the prompt will show it."""
    id: str
    digest: str
    members: list[str]                                  # every member key, most central first
    names: dict[str, str]                               # member key -> name
    described: list[tuple[int, str, str, str]]          # (vector key, key, name, type)
    relations: list[tuple[int, str, tuple[str, ...]]]   # (vector key, pair key, keywords)


@dataclass
class Failure:
    digest: str
    attempts: int
    next_at: float   # monotonic time of the next try


@dataclass
class JobStatus:
    state: str = "starting"        # off | waiting | running | starting
    pending: int = 0               # communities left to summarise after the last run
    failing: int = 0               # of them, those whose last try failed
    last_run: str | None = None    # when the last run ended (UTC, ISO 8601)
    last_seconds: float = 0.0      # the last run's own time
    partition_seconds: float = 0.0  # of which the partition
    runs: int = 0                  # runs since start-up (complete or stopped for documents)
    total_seconds: float = 0.0     # their time since start-up
    summary_calls: int = 0         # model calls since start-up
    failures: int = 0              # failed calls since start-up
    last_error: str | None = None


@dataclass
class Written:
    """Summaries written, waiting for their embeddings and commit."""
    summaries: list[tuple[Planned, str, str]] = field(default_factory=list)   # (community, title, summary)
    entries: list[CacheEntry] = field(default_factory=list)


def community_id(members: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(sorted(members)).encode()).hexdigest()[:32]


def summary_messages(planned: Planned, descriptions: dict[int, str], relation_texts: dict[int, str],
                     language: str) -> list[dict[str, str]]:
    lines = ["Entities:"]
    for vector_key, _, name, kind in planned.described:
        lines.append(f"- {name} ({kind}): {descriptions.get(vector_key, '')[:DESCRIPTION_CHARS]}")
    described = {key for _, key, _, _ in planned.described}
    others = [planned.names[m] for m in planned.members if m not in described][:NAMED_MEMBERS - len(described)]
    if others:
        lines.append("Also members: " + ", ".join(others))
    if planned.relations:
        lines += ["", "Relations:"]
        for vector_key, pair, keywords in planned.relations:
            source, _, target = pair.partition("\x1f")
            label = f" [{', '.join(keywords)}]" if keywords else ""
            lines.append(f"- {planned.names.get(source, source)} -- {planned.names.get(target, target)}{label}: "
                         f"{relation_texts.get(vector_key, '')[:DESCRIPTION_CHARS]}")
    system = ("You summarise one community of a knowledge graph: entities closely related to each other. "
              f"Write in {language}. Reply with JSON: {{\"title\": \"a short name for the community\", "
              "\"summary\": \"one paragraph on what the entities are and how they relate, naming every entity "
              "listed\"}.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


def read_reply(content: str, planned: Planned) -> tuple[str, str]:
    """(title, summary) from the model's JSON; every member the summary leaves unnamed is appended,
    so a list question ("which products does Y develop?") finds its answer's names. ValueError
    when the reply is not the JSON asked for or its summary is empty."""
    reply = json_text.loads(content, max_depth=json_text.BODY_DEPTH)   # a model's reply
    if not isinstance(reply, dict) or not isinstance(reply.get("summary"), str) or not reply["summary"].strip():
        raise ValueError("the reply has no summary")
    summary = reply["summary"].strip()
    given = reply.get("title")
    title = ((given.strip() if isinstance(given, str) else "")
             or ", ".join(planned.names[m] for m in planned.members[:3]))
    lowered = summary.lower()
    missing = [planned.names[m] for m in planned.members[:NAMED_MEMBERS] if planned.names[m].lower() not in lowered]
    if missing:
        summary += "\nMembers: " + ", ".join(missing) + "."
    return title, summary


class CommunitySummaries:
    """The background job (``run``), started in the knowledge service's task group."""

    def __init__(self, store: KnowledgeStore, models: ModelClient, pipeline: Pipeline,
                 settings: CommunitySettings) -> None:
        self.store = store
        self.models = models
        self.pipeline = pipeline
        self.settings = settings
        self.retry_seconds = RETRY_SECONDS
        self.status = JobStatus(state="starting" if settings.community_summaries else "off")
        self.completed = anyio.Event()   # set after each run that left nothing to do but retries
        self._seen = -1                  # the generation the last complete run saw
        self._failed: dict[str, Failure] = {}

    @property
    def up_to_date(self) -> bool:
        """The last complete run saw the knowledge base as it is (failed summaries may wait for a retry)."""
        return self._seen == self.store.generation

    def snapshot(self) -> dict[str, Any]:
        """The job's state for /rag/stats."""
        return dict(vars(self.status))

    # --- the loop ---

    async def run(self) -> None:
        if not self.settings.community_summaries:
            return
        broken = False
        while True:
            await self.pipeline.wait_idle()
            await self.pipeline.gate.wait()   # no summaries embedded by a model the store's vectors are not of
            if self.store.generation == self._seen and not self._retry_due():
                self.status.state = "waiting"
                with anyio.move_on_after(self._retry_wait()):
                    await self.store.wait_for_commit(self._seen)
                continue
            try:
                await self.run_once()
                broken = False
            except Exception as exc:  # noqa: BLE001 - a background job: it must never end the service
                if not broken:   # once, not at every try (a full disk fails every run until it is freed)
                    log.exception("community summaries could not be updated; trying again later")
                broken = True
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                self.status.state = "waiting"
                await anyio.sleep(self.retry_seconds)

    def _retry_due(self) -> bool:
        now = time.monotonic()
        return any(f.next_at <= now for f in self._failed.values())

    def _retry_wait(self) -> float:
        if not self._failed:
            return math.inf
        return max(0.0, min(f.next_at for f in self._failed.values()) - time.monotonic())

    async def run_once(self) -> None:
        """One pass: partition, compare, remove the vanished, summarise the new and changed."""
        started = time.monotonic()
        self.status.state = "running"
        seen = self.store.generation
        stored = await anyio.to_thread.run_sync(self.store.tables.communities.digests_sync)
        previous = [list(members) for _, members in stored.values()]
        communities = await anyio.to_thread.run_sync(
            lambda: self.store.communities_sync(min_size=MIN_MEMBERS, max_size=MAX_MEMBERS, previous=previous))
        self.status.partition_seconds = round(time.monotonic() - started, 3)
        planned: list[Planned] = []
        for start in range(0, len(communities), PLAN_BATCH):   # the lock held for a slice at a time
            planned += await anyio.to_thread.run_sync(self._plan, communities[start:start + PLAN_BATCH])
        wanted = {p.id: p for p in planned}
        todo = [p for p in planned if p.id not in stored or stored[p.id][0] != p.digest]
        self._failed = {k: f for k, f in self._failed.items() if k in wanted and f.digest == wanted[k].digest}
        expected, moved = seen, False

        async def commit(changes: Changeset) -> None:
            nonlocal expected, moved
            async with self.store.replicas.merge_turn():   # several replicas: their summaries commit one at a time
                generation = await self.store.apply(changes)
            moved = moved or generation != expected + 1   # someone else committed meanwhile
            expected = generation

        vanished = [k for k in stored if k not in wanted]
        if vanished:
            await commit(Changeset(communities_removed=vanished))
        now = time.monotonic()
        due = [p for p in todo if p.id not in self._failed or self._failed[p.id].next_at <= now]
        done, interrupted = 0, False
        for start in range(0, len(due), BATCH):
            written = Written()
            for plan in due[start:start + BATCH]:
                if self.pipeline.busy:  # documents come first: resume at the next idle moment
                    interrupted = True
                    break
                await self._summarise(plan, written)
            if written.summaries:
                done += await self._embed_and_commit(written, commit)
            if interrupted:
                break
        self.status.pending = len(todo) - done
        self.status.failing = len(self._failed)
        self.status.last_seconds = round(time.monotonic() - started, 3)
        self.status.runs += 1
        self.status.total_seconds = round(self.status.total_seconds + self.status.last_seconds, 3)
        self.status.last_run = datetime.now(UTC).isoformat(timespec="seconds")
        self.status.state = "waiting"
        if not interrupted and not moved:
            self._seen = expected
            self.completed.set()
            self.completed = anyio.Event()

    # --- one community ---

    def _plan(self, communities: list[Community]) -> list[Planned]:
        """Each community's prompt material from the store's rows (names, types and vector keys only;
        descriptions are read per community later). Blocking."""
        named = self.store.entities_named_sync(list({m for community in communities for m in community.members}))
        pairs = []
        for community in communities:
            inside = set([m for m in community.members if m in named][:PROMPT_MEMBERS])
            pairs += [pair_key(source, target) for source, target, _ in community.edges
                      if source in inside and target in inside]
        stored = self.store.relations_paired_sync(list(dict.fromkeys(pairs)))
        planned = []
        for community in communities:
            members = [m for m in community.members if m in named]
            if len(members) < MIN_MEMBERS:
                continue
            metas = {m: named[m] for m in members}
            shown = members[:PROMPT_MEMBERS]
            inside = set(shown)
            relations = []
            for source, target, _ in community.edges:
                if source in inside and target in inside:
                    pair = pair_key(source, target)
                    relation = stored.get(pair)
                    if relation is not None:
                        relations.append((relation.meta.key, pair, relation.meta.keywords))
                        if len(relations) == PROMPT_RELATIONS:
                            break
            described = [(metas[m].key, m, metas[m].name, metas[m].type) for m in shown]
            digest = hashlib.sha256(json.dumps(
                [sorted([m, metas[m].key] for m in members[:NAMED_MEMBERS]),
                 sorted(k for k, _, _ in relations)]).encode()).hexdigest()[:32]
            planned.append(Planned(community_id(members), digest, members, {m: metas[m].name for m in members},
                                   described, relations))
        return planned

    async def _summarise(self, plan: Planned, written: Written) -> None:
        reads = self.store.tables.retrieval_rows
        descriptions = await anyio.to_thread.run_sync(
            reads.descriptions_sync, "entities", [(vector_key, key) for vector_key, key, _, _ in plan.described])
        relation_texts = await anyio.to_thread.run_sync(
            reads.descriptions_sync, "relations", [(vector_key, pair) for vector_key, pair, _ in plan.relations])
        # in the language of the descriptions summarised unless the setting names one (members' names left out)
        language = language_for(self.settings.language, "\n".join([*descriptions.values(), *relation_texts.values()]),
                                names=[name for _, _, name, _ in plan.described])
        messages = summary_messages(plan, descriptions, relation_texts, language)
        try:
            reply = await self.models.structured("community", messages, SCHEMA, priority=Priority.BACKGROUND)
            if not reply.cached:
                self.status.summary_calls += 1
            title, summary = read_reply(reply.content, plan)
        except (GraphGateError, ValueError) as exc:
            self._record_failure(plan, exc)
            return
        if plan.id in self._failed:
            log.info("community %s summarised after %d failed tries", plan.id[:8], self._failed[plan.id].attempts)
            del self._failed[plan.id]
        written.summaries.append((plan, title, summary))
        if not reply.cached:
            written.entries.append(reply.entry)

    def _record_failure(self, plan: Planned, exc: Exception) -> None:
        """Tried again after a wait that doubles each time; logged once, not at every try."""
        self.status.failures += 1
        message = exc.message if isinstance(exc, GraphGateError) else f"{type(exc).__name__}: {exc}"
        self.status.last_error = message
        previous = self._failed.get(plan.id)
        attempts = previous.attempts + 1 if previous and previous.digest == plan.digest else 1
        wait = min(self.retry_seconds * 2 ** (attempts - 1), RETRY_MAX_SECONDS)
        self._failed[plan.id] = Failure(plan.digest, attempts, time.monotonic() + wait)
        if attempts == 1:
            log.warning("community summary failed (%s); it is tried again later", message)

    async def _embed_and_commit(self, written: Written, commit: Callable[[Changeset], Awaitable[None]]) -> int:
        """The summaries embedded (title and summary together) and committed; how many."""
        texts = [f"{title}\n{summary}" for _, title, summary in written.summaries]
        try:
            vectors = await self.models.embed(texts, priority=Priority.BACKGROUND)
        except GraphGateError as exc:
            for plan, _, _ in written.summaries:
                self._record_failure(plan, exc)
            return 0
        rows = [CommunityRow(plan.id, title, summary, plan.members, plan.digest, vector)
                for (plan, title, summary), vector in zip(written.summaries, vectors, strict=True)]
        await commit(Changeset(communities_upserted=rows, cache_entries=written.entries))
        return len(rows)
