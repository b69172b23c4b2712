"""Turning added and removed chunks into graph changes: load the touched names, recompute them
from their sources (``merging``), summarise long descriptions, embed what changed."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio

from proxy.core import json_text
from proxy.core.language_setting import language_for
from proxy.core.limiter import Priority
from proxy.core.names import normalised
from proxy.core.settings_sections import MergingSettings
from proxy.core.tokens import Tokenizer
from proxy.extraction.results import ExtractionResult
from proxy.merging.edits import Edits
from proxy.merging.resolution import Known, Link, Resolution, introduced, names_asked, resolve_batch
from proxy.merging.rules import (
    ChunkIndex,
    EntityState,
    ExistingEntity,
    RelationState,
    embed_hash,
    entity_row,
    entity_state,
    entity_text,
    index_result,
    mentions,
    merged_sources,
    relation_row,
    relation_state,
    relation_text,
)
from proxy.store.changes import Changeset, EntityRow, RelationRow
from proxy.store.protocols.graph_rows import GraphRows, StoredRow, Subject
from proxy.store.store import KnowledgeStore
from proxy.upstream.model_calls import CacheEntry, ModelClient

log = logging.getLogger("graphgate.ingest")

SUMMARY_SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
SEPARATOR = "\n"


def summary_messages(subject: str, fragments: list[str], language: str) -> list[dict[str, str]]:
    listing = "\n".join(f"- {f}" for f in fragments)
    return [
        {"role": "system", "content": (
            "You merge notes about one subject of a knowledge graph into a single description. Keep every "
            "distinct fact, drop repetition, resolve nothing by guessing, write in the third person, "
            f"in {language}. Reply with JSON: {{\"summary\": \"...\"}}.")},
        {"role": "user", "content": f"Subject: {subject}\n\nNotes:\n{listing}"},
    ]


class ParsedExtractions:
    """Chunks' extraction results, parsed and indexed under the current aliases, for the chunks
    merged lately. Safe to keep: a chunk id is its content's hash and its extraction is written
    once, never changed; worth keeping: a merge recomputes every touched name from all its
    sources, and names recur in documents merged close together."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._aliases: dict[str, str] | None = None
        self._entries: OrderedDict[str, ChunkIndex] = OrderedDict()

    def index(self, chunk_id: str, result: ExtractionResult, aliases: dict[str, str]) -> ChunkIndex:
        entry = index_result(result, aliases)
        if aliases == self._aliases:
            self._entries[chunk_id] = entry
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return entry

    def use(self, aliases: dict[str, str]) -> None:
        """Index under ``aliases`` from now on; what was indexed under others is dropped."""
        if aliases != self._aliases:
            self._aliases, self._entries = dict(aliases), OrderedDict()

    def lookup(self, chunk_ids: Iterable[str], aliases: dict[str, str]) -> tuple[dict[str, ChunkIndex], list[str]]:
        """(indexes held, chunk ids to read) under ``aliases``."""
        self.use(aliases)
        found, missing = {}, []
        for chunk_id in chunk_ids:
            entry = self._entries.get(chunk_id)
            if entry is None:
                missing.append(chunk_id)
            else:
                self._entries.move_to_end(chunk_id)
                found[chunk_id] = entry
        return found, missing

    async def read(self, tables: GraphRows, chunk_ids: Iterable[str], aliases: dict[str, str]) -> dict[str, ChunkIndex]:
        found, missing = self.lookup(chunk_ids, aliases)
        for chunk_id, result in (await read_extractions(tables, missing)).items():
            found[chunk_id] = self.index(chunk_id, result, aliases)
        return found


async def read_extractions(tables: GraphRows, chunk_ids: Iterable[str]) -> dict[str, ExtractionResult]:
    """The stored extraction results of the chunks that have one, parsed."""
    stored = await tables.extractions(sorted(chunk_ids))
    return {chunk_id: ExtractionResult.from_json(result) for chunk_id, result in stored.items()}


# a row to build: kind ("entity" or "relation"), key, description, state, text to embed
Pending = tuple[str, str, str, EntityState | RelationState, str]


def as_existing(rows: dict[str, StoredRow]) -> dict[str, ExistingEntity]:
    # the vector is read later, and only if the row's text did not change
    return {key: ExistingEntity(r.name, r.source_ids, r.key, r.embed_hash, None) for key, r in rows.items()}


@dataclass
class Overlay:
    """What a commit still on its way writes, read instead of the tables while the next batch is
    prepared: its entity and relation rows by key, and the chunks it adds. (Commits that remove
    anything are never overlaid: the next batch waits for them.)"""
    entities: dict[str, EntityRow]
    relations: dict[str, RelationRow]
    chunks: set[str]

    @classmethod
    def of(cls, changes: Changeset) -> Overlay:
        return cls({row.name_key: row for row in changes.entities_upserted},
                   {row.pair_key: row for row in changes.relations_upserted},
                   {chunk.id for chunk in changes.chunks_added})

    @staticmethod
    def over(found: dict[str, ExistingEntity], rows: dict[str, EntityRow] | dict[str, RelationRow],
             keys: Iterable[str]) -> None:
        # the key may still be 0 here (assigned as the commit runs): the row then just gets a new one
        for key in keys:
            row = rows.get(key)
            if row is not None:
                found[key] = ExistingEntity(getattr(row, "name", ""), list(row.source_ids), row.key,
                                            row.embed_hash, row.embedding)


@dataclass
class GraphChanges:
    entities: list[EntityRow] = field(default_factory=list)
    relations: list[RelationRow] = field(default_factory=list)
    entities_removed: list[str] = field(default_factory=list)
    relations_removed: list[str] = field(default_factory=list)
    cache_entries: list[CacheEntry] = field(default_factory=list)
    resolved: list[Link] = field(default_factory=list)   # new aliases entity resolution made
    merges: list[Link] = field(default_factory=list)     # stored entities to merge once this is committed


class Integrator:
    def __init__(self, store: KnowledgeStore, models: ModelClient, settings: MergingSettings,
                 tokenizer: Tokenizer) -> None:
        self.store = store
        self.models = models
        self.settings = settings
        self.tokenizer = tokenizer
        self.parsed = ParsedExtractions()

    async def changes(self, added: dict[str, ExtractionResult], removed: set[str],
                      overlay: Overlay | None = None, texts: dict[str, str] | None = None) -> GraphChanges:
        """The graph rows ``added`` chunks' extractions (their texts in ``texts``) and ``removed``
        chunks change, names of one thing resolved into one entity (``proxy.merging.resolution``)."""
        tables = self.store.tables.graph_rows
        aliases = await tables.aliases()
        resolution = await self._resolve(added, texts or {}, aliases, overlay)
        aliases.update({link.alias: link.target for link in resolution.links})
        new_entities: dict[str, list[str]] = {}
        new_pairs: dict[str, list[str]] = {}
        self.parsed.use(aliases)
        indexes = {chunk_id: self.parsed.index(chunk_id, result, aliases) for chunk_id, result in added.items()}
        for chunk_id, index in indexes.items():
            mentioned_entities, mentioned_pairs = mentions(index)
            for key in mentioned_entities:
                new_entities.setdefault(key, []).append(chunk_id)
            for pair in mentioned_pairs:
                new_pairs.setdefault(pair, []).append(chunk_id)
        touched_entities, touched_pairs = await tables.touched_by(sorted(removed))
        entity_keys, pair_keys = sorted(set(new_entities) | touched_entities), sorted(set(new_pairs) | touched_pairs)
        old_entities = as_existing(await tables.stored_rows("entities", entity_keys))
        old_relations = as_existing(await tables.stored_rows("relations", pair_keys))
        if overlay is not None:
            Overlay.over(old_entities, overlay.entities, entity_keys)
            Overlay.over(old_relations, overlay.relations, pair_keys)

        out = GraphChanges(resolved=resolution.links, merges=resolution.merges)
        entity_sources = self._sources(new_entities, old_entities, removed, out.entities_removed)
        relation_sources = self._sources(new_pairs, old_relations, removed, out.relations_removed)
        wanted = {c for s in (*entity_sources.values(), *relation_sources.values()) for c in s} - set(added)
        indexes.update(await self.parsed.read(tables, wanted, aliases))

        edits = await self.edits(sorted(entity_sources), sorted(relation_sources))
        await self._recompute(entity_sources, relation_sources, indexes, old_entities, old_relations, edits, out,
                              overlay)
        return out

    async def _resolve(self, added: dict[str, ExtractionResult], texts: dict[str, str], aliases: dict[str, str],
                       overlay: Overlay | None) -> Resolution:
        """Entity resolution's links for the batch, decided in a worker thread (tens of ms for a
        large batch: never on the event loop)."""
        if not added or not self.settings.entity_resolution:
            return Resolution([], [])
        dismissed = await anyio.to_thread.run_sync(self.store.tables.graph_rows.dismissed_sync)
        overlaid = dict(overlay.entities) if overlay is not None else {}

        def decide() -> Resolution:
            intros = introduced(added, texts)
            keys, cores = names_asked(added, intros)
            present, by_core = self.store.names.known_sync(keys, cores)
            # the rows of the commit in flight are not in the store's memory yet
            present |= keys & set(overlaid)
            for key, row in overlaid.items():
                by_core.setdefault(normalised(row.name), []).append((key, row.name, row.type))
            known = Known(present.__contains__, lambda core: by_core.get(core, []), aliases, dismissed)
            return resolve_batch(added, intros, known)

        return await anyio.to_thread.run_sync(decide)

    async def rebuild(self, entity_sources: dict[str, list[str]], relation_sources: dict[str, list[str]],
                      aliases: dict[str, str], edits: Edits, removed_entities: list[str],
                      removed_relations: list[str]) -> GraphChanges:
        """Recompute the given names from the given sources under ``aliases`` and ``edits`` (both
        possibly not committed yet): what a merge, a rename or a hand edit commits."""
        tables = self.store.tables.graph_rows
        wanted = sorted({c for s in (*entity_sources.values(), *relation_sources.values()) for c in s})
        indexes = await self.parsed.read(tables, wanted, aliases)
        old_entities = as_existing(await tables.stored_rows("entities", sorted(entity_sources)))
        old_relations = as_existing(await tables.stored_rows("relations", sorted(relation_sources)))
        out = GraphChanges(entities_removed=list(removed_entities), relations_removed=list(removed_relations))
        await self._recompute(entity_sources, relation_sources, indexes, old_entities, old_relations, edits, out)
        return out

    async def edits(self, entity_keys: list[str], pair_keys: list[str]) -> Edits:
        """The hand edits stored for these entities and relations."""
        stored = await self.store.tables.graph_rows.edits(entity_keys, pair_keys)
        return Edits(stored.entities, stored.relations)

    async def extractions(self, chunk_ids: Iterable[str]) -> dict[str, ExtractionResult]:
        """The stored extraction results of the chunks that have one, parsed."""
        return await read_extractions(self.store.tables.graph_rows, chunk_ids)

    async def _recompute(self, entity_sources: dict[str, list[str]], relation_sources: dict[str, list[str]],
                         indexes: dict[str, ChunkIndex], old_entities: dict[str, ExistingEntity],
                         old_relations: dict[str, ExistingEntity], edits: Edits, out: GraphChanges,
                         overlay: Overlay | None = None) -> None:
        def states() -> tuple[list[EntityState], list[RelationState], dict[int, str]]:
            entities = [entity_state(k, old_entities[k].name if k in old_entities else None, s, indexes)
                        for k, s in entity_sources.items()]
            relations = [relation_state(k, s, indexes) for k, s in relation_sources.items()]
            return entities, relations, edits.apply(entities, relations)

        # a big merge recomputes thousands of states: in a worker thread, never on the event loop
        # (it held the loop 100-150 ms at a time during ingestion)
        entity_states, relation_states, fixed = await anyio.to_thread.run_sync(states)
        names = await self._endpoint_names(relation_states)
        if overlay is not None:  # spellings the commit in flight has not yet put in the rows
            names.update({key: overlay.entities[key].name for rel in relation_states
                          for key in (rel.source, rel.target) if key in overlay.entities})
        names.update({state.name_key: state.name for state in entity_states})
        await self._build_rows(entity_states, relation_states, names, old_entities, old_relations, fixed, out)

    async def _endpoint_names(self, relations: list[RelationState]) -> dict[str, str]:
        """Stored spellings of relation endpoints that are not being recomputed themselves."""
        if not relations:
            return {}
        endpoints = [key for rel in relations for key in (rel.source, rel.target)]
        found = await anyio.to_thread.run_sync(self.store.entities_named_sync, endpoints)
        return {key: meta.name for key, meta in found.items()}

    @staticmethod
    def _sources(new: dict[str, list[str]], old: dict[str, ExistingEntity], removed: set[str],
                 gone: list[str]) -> dict[str, list[str]]:
        sources = {}
        for key in sorted(set(new) | set(old)):
            merged = merged_sources(old[key].source_ids if key in old else [], new.get(key, []), removed)
            if merged:
                sources[key] = merged
            elif key in old:
                gone.append(key)
        return sources

    def _needs_summary(self, fragments: list[str]) -> bool:
        if len(fragments) >= self.settings.summary_fragments:
            return True
        joined = SEPARATOR.join(fragments)
        # every cl100k token covers at least one UTF-8 byte: a text of no more bytes than the
        # threshold is within it, and most descriptions are (tiktoken is skipped for them)
        if len(joined.encode()) <= self.settings.summary_tokens:
            return False
        return self.tokenizer.count(joined) > self.settings.summary_tokens

    async def _summarise(self, subject: str, fragments: list[str], out: GraphChanges) -> str:
        joined = SEPARATOR.join(fragments)
        # in the notes' own language unless the setting names one (the subject's name left out)
        language = language_for(self.settings.language, joined, names=(subject,))
        reply = await self.models.structured("summary", summary_messages(subject, fragments, language),
                                             SUMMARY_SCHEMA, priority=Priority.SUMMARY)
        try:
            summary = str(json_text.loads(reply.content, max_depth=json_text.BODY_DEPTH)["summary"]).strip()
        except (ValueError, KeyError, TypeError):
            log.warning("summary for %r was not valid JSON; keeping the joined descriptions", subject)
            return joined
        if not summary:
            return joined
        out.cache_entries.append(reply.entry)
        return summary

    async def _describe_all(self, subjects: list[str], fragments: list[list[str]], fixed: dict[int, str],
                            out: GraphChanges) -> list[str]:
        """Every description at once: the fragments joined, or summarised by the LLM past the
        thresholds (those calls run concurrently; the limiter caps them); a description fixed by a
        hand edit is kept as it is."""
        results: list[str] = [fixed.get(i, "") for i in range(len(subjects))]
        long: list[int] = []

        def join_short() -> None:   # thousands of descriptions, some tokenised: off the event loop
            for i in range(len(subjects)):
                if i in fixed:
                    continue
                if self._needs_summary(fragments[i]):
                    long.append(i)
                else:
                    results[i] = SEPARATOR.join(fragments[i])

        await anyio.to_thread.run_sync(join_short)

        async def one(i: int) -> None:
            results[i] = await self._summarise(subjects[i], fragments[i], out)

        if long:
            async with anyio.create_task_group() as group:
                for i in long:
                    group.start_soon(one, i)
        return results

    async def _build_rows(self, entities: list[EntityState], relations: list[RelationState], names: dict[str, str],
                          old_entities: dict[str, ExistingEntity], old_relations: dict[str, ExistingEntity],
                          fixed: dict[int, str], out: GraphChanges) -> None:
        model = self.settings.embed_model
        subjects = [state.name for state in entities] + [
            f"{names.get(r.source, r.source)} and {names.get(r.target, r.target)}" for r in relations]
        fragments = [state.fragments for state in entities] + [r.fragments for r in relations]
        descriptions = await self._describe_all(subjects, fragments, fixed, out)
        old = {**{("entity", k): v for k, v in old_entities.items()},
               **{("relation", k): v for k, v in old_relations.items()}}

        def texts() -> tuple[list[Pending], list[str], list[int]]:
            pending: list[Pending] = []
            for state, description in zip(entities, descriptions, strict=False):
                pending.append(("entity", state.name_key, description, state, entity_text(state.name, description)))
            for rel, description in zip(relations, descriptions[len(entities):], strict=True):
                text = relation_text(rel.keywords, names.get(rel.source, rel.source),
                                     names.get(rel.target, rel.target), description)
                pending.append(("relation", rel.pair_key, description, rel, text))
            digests = [embed_hash(model, text) for *_, text in pending]
            stale = [i for i, (kind, key, *_rest) in enumerate(pending)
                     if (kind, key) not in old or old[(kind, key)].embed_hash != digests[i]]
            return pending, digests, stale

        # the texts, their digests and the rows of a big merge: worker threads, not the event loop
        pending, digests, stale = await anyio.to_thread.run_sync(texts)
        vectors = await self.models.embed([pending[i][4] for i in stale], priority=Priority.INGEST)
        fresh = dict(zip(stale, vectors, strict=True))
        await self._reused_embeddings(pending, stale, old)

        def rows() -> None:
            for i, (kind, key, description, subject, _text) in enumerate(pending):
                existing = old.get((kind, key))
                if isinstance(subject, EntityState):  # kind "entity"
                    out.entities.append(entity_row(subject, description, digests[i], existing, fresh.get(i)))
                else:
                    out.relations.append(relation_row(subject, description, digests[i], existing, fresh.get(i)))

        await anyio.to_thread.run_sync(rows)


    async def _reused_embeddings(self, pending: list[Pending], stale: list[int],
                                 old: dict[tuple[str, str], ExistingEntity]) -> None:
        """Read the stored vectors of the rows whose text did not change (most touched rows did:
        reading every touched row's vector up front was wasted work)."""
        unchanged = set(range(len(pending))) - set(stale)
        subjects: tuple[tuple[str, Subject], ...] = (("entity", "entities"), ("relation", "relations"))
        for kind, table in subjects:
            keys = sorted(pending[i][1] for i in unchanged if pending[i][0] == kind and (kind, pending[i][1]) in old
                          and old[(kind, pending[i][1])].embedding is None)  # an overlaid row has its vector
            if keys:
                vectors = await self.store.tables.graph_rows.embeddings(table, keys)
                for key, vector in zip(keys, vectors, strict=True):
                    old[(kind, key)].embedding = vector
