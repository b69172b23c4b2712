"""The merge stage of the pipeline: extracted documents into the graph, a batch at a time.

A batch is prepared (stored state read, names recomputed, descriptions summarised, texts
embedded) and then committed (tables, then indexes and graph, in worker threads). Batches
overlap: while one commits, the next is prepared against the rows the committing one writes (an
``Overlay``), so that neither the store's writer nor the upstream waits for the other. Batches
that remove anything (a new version replacing an old one) do not overlap.

Everything else that changes the graph (deletes, curation) takes ``exclusive()``: the merge lock,
then no commit in flight. On a store several replicas share, batches and edits also hold the
knowledge base's merge turn (``ReplicaFollowing.merge_turn``), so replicas merge one at a time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from proxy.core.errors import GraphGateError
from proxy.core.limiter import Priority
from proxy.core.settings_sections import MergingSettings
from proxy.extraction.per_chunk import ExtractionFailed
from proxy.extraction.results import ExtractionResult, capped_note
from proxy.merging.curation import Curator
from proxy.merging.recompute import Integrator, Overlay
from proxy.merging.resolution import Link
from proxy.merging.work import MergeReports, Work
from proxy.store.changes import Changeset, ChunkRow, Curation, DocumentUpdate
from proxy.store.store import KnowledgeStore
from proxy.upstream.model_calls import ModelClient

log = logging.getLogger("graphgate.ingest")

MERGE_BATCH = 48  # documents merged in one transaction when they wait together
TURN_RETRY_SECONDS = 1.0  # after the merge turn could not be taken (the shared store's server away)
TURN_SECONDS = 2.0  # on a shared store, the longest this replica merges batch after batch before letting others in


@dataclass
class InFlight:
    """A batch whose commit is running."""
    works: list[Work]
    overlay: Overlay | None  # None: the next batch must wait for this one to finish
    done: anyio.Event
    merges: list[Link] = field(default_factory=list)   # entity resolution's, once committed
    failed: bool = False


class Merger:
    """Documents handed over with ``submit`` are merged; ``reports`` hears of each one it is done
    with (failed, or gone from the merge stage)."""

    def __init__(self, store: KnowledgeStore, models: ModelClient, settings: MergingSettings, integrator: Integrator,
                 reports: MergeReports) -> None:
        self.store = store
        self.models = models
        self.settings = settings
        self.integrator = integrator
        self.reports = reports
        self._send, self._receive = anyio.create_memory_object_stream[Work](max_buffer_size=1_000_000)
        self.lock = anyio.Lock()
        self.inflight: InFlight | None = None
        self._group: TaskGroup | None = None
        self._turn: contextlib.AsyncExitStack | None = None   # the merge turn held (a shared store)
        self._curator = Curator(store, integrator, self.exclusive)
        # committed batches' links between two stored entities, with the batch's documents: these stay
        # "processing" until their links are merged (so "processed" means a chat finds one entity)
        self._resolved_later: list[tuple[list[Link], list[Work]]] = []
        self._turn_since = 0.0

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """The graph to oneself: no batch being prepared and none committing."""
        async with self.lock:
            await self._settle()
            async with self.store.replicas.merge_turn():   # and, on a shared store, from the other replicas
                yield

    def submit(self, work: Work) -> None:
        """Queue an extracted document for merging."""
        self._send.send_nowait(work)

    async def _settle(self) -> bool:
        """Wait for the commit in flight, if any; False if it failed (its documents are then merged
        again one by one)."""
        inflight = self.inflight
        if inflight is None:
            return True
        await inflight.done.wait()  # cleared only once done: a caller cancelled here hides nothing
        if self.inflight is inflight:
            self.inflight = None
        return not inflight.failed

    # --- the loop ---

    async def run(self, group: TaskGroup) -> None:
        self._group = group
        receive = self._receive
        while True:
            if self._resolved_later:
                await self._merge_resolved()
            if self.inflight is None:
                try:
                    batch = [receive.receive_nowait()]
                except anyio.WouldBlock:   # idle: the other replicas may merge
                    await self._end_turn()
                    batch = [await receive.receive()]
            else:
                try:
                    batch = [receive.receive_nowait()]
                except anyio.WouldBlock:  # nothing to prepare meanwhile: let the commit finish
                    async with self.lock:
                        await self._settle()
                    await self._end_turn()
                    continue
            while len(batch) < MERGE_BATCH:
                try:
                    batch.append(receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            ready = []
            for work in batch:
                try:
                    for commit in work.commits:
                        await commit.wait()
                    ready.append(work)
                except Exception as exc:  # noqa: BLE001 - only this document failed to record
                    await self.reports.fail_with(work.document_id, exc)
            try:
                await self._end_turn(if_held_for=TURN_SECONDS)
                await self._take_turn()
            except GraphGateError as exc:   # the shared store's server away past its retries
                for work in ready:   # left for later (proxy/ingest/pipeline.py: their leases run out)
                    await self.reports.fail_with(work.document_id, exc)
                self._finished(batch)
                await anyio.sleep(TURN_RETRY_SECONDS)
                continue
            async with self.lock:
                try:
                    await self._merge_batch(batch, ready)
                except Exception as exc:  # noqa: BLE001 - e.g. a read the store refused: these
                    # documents fail (and can be retried); the merging of later ones goes on
                    if self.inflight is not None and self.inflight.works is batch:
                        raise  # already committing: it reports for itself
                    for work in ready:
                        await self.reports.fail_with(work.document_id, exc)
                    self._finished(batch)

    # --- the merge turn, on a store several replicas share ---

    async def _take_turn(self) -> None:
        """Other replicas merge into the same graph: batches are prepared and committed within this
        replica's merge turn, held from batch to batch (so that one still overlaps the next) until
        the merger falls idle or has held it TURN_SECONDS. A turn lost meanwhile (its connection
        ended: a server restart) is let go and taken again, over the others' commits since."""
        if self._turn is not None and not await self.store.replicas.merge_turn_held():
            log.warning("the merge turn was lost with its connection; taking it again")
            turn, self._turn = self._turn, None
            async with self.lock:
                await self._settle()
            with contextlib.suppress(GraphGateError):
                await turn.aclose()
        if self.store.backend.shared and self._turn is None:
            stack = contextlib.AsyncExitStack()
            await stack.enter_async_context(self.store.replicas.merge_turn())
            self._turn, self._turn_since = stack, time.monotonic()

    async def _end_turn(self, *, if_held_for: float = 0.0) -> None:
        if self._turn is None or time.monotonic() - self._turn_since < if_held_for:
            return
        async with self.lock:
            await self._settle()   # the commit in flight lands within the turn
        turn, self._turn = self._turn, None
        await turn.aclose()

    async def _merge_batch(self, batch: list[Work], ready: list[Work]) -> None:
        for work in ready:
            work.phase = "merging"
        stored = await self.store.tables.documents.get_many([w.document_id for w in ready])
        live = [w for w in ready if not w.scope.cancel_called and w.document_id in stored]
        if any(w.alone for w in live):  # documents whose batch failed to commit
            await self._settle()
            await self._one_by_one(batch, live, stored)
            return
        replacing = any(stored[w.document_id].get("replaces") for w in live)
        overlay = self.inflight.overlay if self.inflight is not None and not replacing else None
        if overlay is None:
            await self._settle()  # prepared against the tables as committed
        changes: Changeset | None = None
        merges: list[Link] = []
        if live:
            try:
                changes, merges = await self._prepare(live, stored, overlay)
            except Exception as exc:  # noqa: BLE001 - the batch fails; each document is tried alone
                log.info("merging %d documents together failed (%s); merging them one by one", len(live), exc)
        if not await self._settle() and overlay is not None:
            changes = None  # prepared against a commit that did not happen
        if changes is None:
            await self._one_by_one(batch, live, stored)
            return
        assert self._group is not None
        self.inflight = InFlight(batch, None if _removes(changes) else Overlay.of(changes), anyio.Event(), merges)
        self._group.start_soon(self._commit, self.inflight, changes, [w for w in batch if w not in live])

    async def _merge_resolved(self) -> None:
        """Entity resolution's links between two entities already stored, merged now that the batch
        that found them is committed (a curation, like a merge by hand, with its evidence kept)."""
        later, self._resolved_later = self._resolved_later, []
        for links, works in later:
            for link in links:
                try:
                    await self._curator.merge_resolved(link)
                except Exception as exc:  # noqa: BLE001 - one of them went meanwhile (a delete, a hand
                    # merge), or the store refused: the two stay apart (a merge suggestion may offer them)
                    log.info("entity resolution left %r and %r apart: %s", link.alias, link.target, exc)
            self._finished(works)

    async def _commit(self, inflight: InFlight, changes: Changeset, skipped: list[Work]) -> None:
        try:
            await self.store.apply(changes)
            log.info("%d documents merged: %d new chunks, %d entities and %d relations touched",
                     len(inflight.works) - len(skipped), len(changes.chunks_added), len(changes.entities_upserted),
                     len(changes.relations_upserted))
            if inflight.merges:
                self._resolved_later.append((inflight.merges, inflight.works))
            else:
                self._finished(inflight.works)
        except Exception as exc:  # noqa: BLE001 - each document again, alone, by the merge loop
            log.info("committing %d merged documents failed (%s); merging them one by one",
                     len(inflight.works), exc)
            inflight.failed = True
            for work in inflight.works:
                if work not in skipped:
                    work.alone = True
                    self.submit(work)
            self._finished(skipped)
        finally:
            inflight.done.set()

    async def _one_by_one(self, batch: list[Work], live: list[Work], stored: dict[str, dict[str, Any]]) -> None:
        """Each document of ``live`` merged and committed on its own, so a bad one fails alone."""
        merges: list[Link] = []
        for work in live:
            try:
                changes, found = await self._prepare([work], stored, None)
                await self.store.apply(changes)
                merges += found
            except Exception as exc:  # noqa: BLE001 - this document fails; merging goes on
                await self.reports.fail_with(work.document_id, exc)
        if merges:
            self._resolved_later.append((merges, batch))
        else:
            self._finished(batch)

    def _finished(self, works: list[Work]) -> None:
        for work in works:
            self.reports.merge_ended(work.document_id)

    # --- preparing a batch ---

    async def _prepare(self, works: list[Work], stored: dict[str, dict[str, Any]],
                       overlay: Overlay | None) -> tuple[Changeset, list[Link]]:
        """One transaction's changes for the documents in ``works`` (their rows in ``stored``):
        their new chunks, the graph changes, the chunks of the versions they replace, their status;
        and the links entity resolution found between entities already stored (merged after the commit)."""
        tables = self.store.tables
        documents = {w.document_id: stored[w.document_id] for w in works}
        unique = {c.id: c for w in works for c in w.chunks}
        present = await tables.documents.stored_chunk_ids(list(unique))
        if overlay is not None:
            present |= overlay.chunks & set(unique)
        new_chunks = [c for c in unique.values() if c.id not in present]
        added = {chunk_id: ExtractionResult.from_json(result)
                 for chunk_id, result in (await tables.graph_rows.extractions([c.id for c in new_chunks])).items()}
        if missing := [c.id for c in new_chunks if c.id not in added]:
            raise ExtractionFailed(f"{len(missing)} chunks have no stored extraction; retry the document")
        replaced = [d["replaces"] for d in documents.values() if d.get("replaces")]
        removed = sorted({c for old in replaced for c in await tables.documents.orphaned_chunks(old, list(unique))})
        graph = await self.integrator.changes(added, set(removed), overlay, {c.id: c.content for c in new_chunks})
        vectors = await self.models.embed([c.content for c in new_chunks], priority=Priority.INGEST)
        return Changeset(
            chunks_added=[ChunkRow(c.id, c.content, c.tokens, v) for c, v in zip(new_chunks, vectors, strict=True)],
            chunks_removed=removed,
            links_added=[(w.document_id, c.id, c.order) for w in works for c in w.chunks],
            documents_removed=replaced,
            entities_upserted=graph.entities, entities_removed=graph.entities_removed,
            relations_upserted=graph.relations, relations_removed=graph.relations_removed,
            # a document whose chunks' extractions were cut to their caps says so in its error field
            documents=[DocumentUpdate(w.document_id, "processed", capped_note(added[c.id] for c in w.chunks
                                                                              if c.id in added), w.total, w.total)
                       for w in works],
            cache_entries=graph.cache_entries, embed_model=self.settings.embed_model,
            curation=Curation(aliases={link.alias: link.target for link in graph.resolved},
                              resolved={link.alias: (link.reason, link.evidence) for link in graph.resolved},
                              resolved_into_dropped=list(graph.entities_removed)),
        ), graph.merges


def _removes(changes: Changeset) -> bool:
    """Whether the next batch must wait for this one's commit: it removes something, or makes
    aliases (an overlay carries rows only, and the next batch resolves its names by the aliases)."""
    return bool(changes.chunks_removed or changes.documents_removed or changes.entities_removed
                or changes.relations_removed or changes.curation.aliases)
