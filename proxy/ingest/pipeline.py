"""The document pipeline: durable, resumable, one document at a time per worker.

    pending --(worker)--> processing: chunk -> extract each new chunk (progress per chunk)
                          -> merge + embed + commit in one transaction -> processed | failed

A document is stored before its upload is acknowledged; at start-up every pending or interrupted
document is queued again, and chunks whose extraction is stored are not sent to the LLM twice.
Merging (``Merger``, proxy/merging/batches.py) is serialised, so concurrent documents never race on an
entity; it reports each document it is done with back to the pipeline (``fail_with``, ``merge_ended``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
import time
from collections import deque
from typing import Any, cast

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from proxy.core.errors import Conflict, GraphGateError, NotFound, StorageError, first_error
from proxy.core.settings_sections import IngestSettings
from proxy.core.tokens import Tokenizer
from proxy.extraction.per_chunk import extract_chunk
from proxy.ingest.gate import IngestGate
from proxy.ingest.leases import Leases
from proxy.merging.batches import Merger
from proxy.merging.recompute import Integrator
from proxy.merging.work import Work, describe
from proxy.parsing.chunking import Chunk, chunk_text
from proxy.parsing.files import ParsedDocument
from proxy.store.changes import Changeset, Curation
from proxy.store.protocols.documents import Committed, ExtractionRecord
from proxy.store.protocols.tables import SharedTables
from proxy.store.store import KnowledgeStore, now
from proxy.upstream.model_calls import CacheEntry, ModelClient

log = logging.getLogger("graphgate.ingest")
HANDOVER_BYTES = 64_000_000  # memory for the text of queued uploads, kept for their workers; the rest is read back


class Pipeline:
    def __init__(self, store: KnowledgeStore, models: ModelClient, settings: IngestSettings,
                 tokenizer: Tokenizer) -> None:
        self.store = store
        self.models = models
        self.settings = settings
        self.tokenizer = tokenizer
        self.documents = store.tables.documents
        self.integrator = Integrator(store, models, settings, tokenizer)
        self.merger = Merger(store, models, settings, self.integrator, self)
        self.submit_lock = anyio.Lock()  # serialises uploads among themselves (not with merges)
        self._send, self._receive = anyio.create_memory_object_stream[str](max_buffer_size=1_000_000)
        self.queued: dict[str, None] = {}
        self.running: dict[str, Work] = {}   # being chunked and extracted
        self.merging: dict[str, Work] = {}   # extracted, waiting for (or in) the merge
        self.requeue: set[str] = set()       # queued again while still running: picked up when it ends
        self.unrecorded_failures: dict[str, str] = {}  # document id -> error the disk would not take
        # uploads, "processing" statuses and finished extractions share transactions: a lone write
        # is committed at once, writes that arrive while the store is busy (a merge) go together
        self.writes = self.documents.ingest_writes()
        self.upload_writer = self.writes.uploads
        self.status_writer = self.writes.starts
        # a first extraction pass answered while its chunk still waits for gleaning: committed at once
        self.reply_writer = self.writes.replies
        self.extraction_writer = self.writes.extractions
        # chunks extracted by this process whose records are still queued behind the store's writer
        # (a merge can hold it for seconds): another document holding the same text waits for the
        # record instead of paying for the extraction again
        self.recording: dict[str, Committed] = {}
        self.stored_seq = 0  # uploads stored so far; with when each id and name was last stored
        self._stored_at: dict[str, int] = {}
        self._stored_forgotten = 0
        self.inserting: dict[str, Committed] = {}  # document id or name -> its insert, until committed
        self._handed: dict[str, tuple[str, str]] = {}  # document id -> (name, text) for its worker
        self._handed_bytes = 0
        # (monotonic time, chunks) of recent extractions, for rates
        self.finished: deque[tuple[float, int]] = deque(maxlen=1000)
        self.idle = anyio.Event()
        self._group: TaskGroup | None = None
        # closed while the store's vectors come from another embedding model: documents wait, pending
        self.gate = IngestGate()
        # on a store several replicas share, a document is worked on once this replica claims it
        self.leases = Leases(cast(SharedTables, store.tables).queue, settings.ingest_lease_seconds) \
            if store.backend.shared else None

    # --- lifecycle ---

    async def start(self, group: TaskGroup) -> None:
        self._group = group
        if self.leases is None:
            for document_id in await self.documents.unfinished_ids():
                self._enqueue(document_id)
        else:   # the unfinished documents no replica holds are claimed as workers fall free
            group.start_soon(self.leases.run, lambda: [*self.queued, *self.running, *self.merging],
                             self._free_workers, self._enqueue, self._cancel)
        for _ in range(self.settings.parallel_documents):
            group.start_soon(self._worker)
        group.start_soon(self.merger.run, group)
        group.start_soon(self.writes.run)

    def _enqueue(self, document_id: str) -> None:
        self.unrecorded_failures.pop(document_id, None)
        if document_id in self.running or document_id in self.merging:
            self.requeue.add(document_id)  # e.g. deleted and uploaded again while its old run unwinds
            return
        if document_id not in self.queued:
            self.queued[document_id] = None
            self.idle = anyio.Event() if self.idle.is_set() else self.idle
            self._send.send_nowait(document_id)

    async def _worker(self) -> None:
        """Chunk and extract; then hand the document to the merger and take the next one, so the
        LLM keeps working while merges (one at a time) run."""
        async for document_id in self._receive:
            await self.gate.wait()   # still queued (pending) meanwhile
            if self.queued.pop(document_id, "gone") == "gone":
                continue  # deleted or replaced while queued
            if not await self._claimed(document_id):
                self._take_handed(document_id)   # its text is read back by the replica that has it
                self.finished_run(document_id)
                continue  # another replica works on it
            work = Work(document_id, "")
            self.running[document_id] = work
            extracted = False
            with work.scope:
                try:
                    await self._extract_document(work)
                    extracted = True
                except Exception as exc:  # noqa: BLE001 - a failure must not kill the worker
                    await self.fail_with(document_id, exc)
            self.running.pop(document_id, None)
            if extracted and not work.scope.cancel_called and document_id not in self.requeue:
                work.phase, work.scope = "waiting to merge", anyio.CancelScope()
                self.merging[document_id] = work
                self.merger.submit(work)
            self.finished_run(document_id)

    async def _claimed(self, document_id: str) -> bool:
        """Whether this replica may work on the document (always, on a store of its own)."""
        if self.leases is None or document_id in self.leases.held:
            return True
        try:
            return await self.leases.claim(document_id)
        except GraphGateError as exc:   # the server unreachable: the lease beat claims it later
            log.warning("could not claim document %s (%s)", document_id, exc.message)
            return False

    def _free_workers(self) -> int:
        if self.gate.closed:   # claim nothing another replica could work on
            return 0
        return max(0, self.settings.parallel_documents - len(self.running) - len(self.queued))

    def merge_ended(self, document_id: str) -> None:
        """The merge stage is done with ``document_id`` (merged, failed or dropped)."""
        self.merging.pop(document_id, None)
        self.finished_run(document_id)

    def finished_run(self, document_id: str) -> None:
        """A run of ``document_id`` ended: start the one asked for meanwhile, if any."""
        if document_id in self.requeue and document_id not in self.running and document_id not in self.merging:
            self.requeue.discard(document_id)
            self._enqueue(document_id)
        self._check_idle()

    def _check_idle(self) -> None:
        if not self.queued and not self.running and not self.merging and not self.idle.is_set():
            self.idle.set()
            if self._group is not None:  # a quiet moment: move the store's log into its file
                self._group.start_soon(self._checkpoint)

    async def _checkpoint(self) -> None:
        try:
            await self.store.checkpoint()
        except Exception as exc:  # noqa: BLE001 - DuckDB checkpoints again by itself later
            log.warning("could not checkpoint the store: %s", exc)

    async def fail_with(self, document_id: str, exc: Exception) -> None:
        error = first_error(exc)
        if self.leases is not None and isinstance(error, StorageError) and error.status == 503:
            # the shared store's server away for longer than its retries: not the document's fault.
            # Its lease is left to run out, and a replica (this one too) takes it up again then.
            log.warning("document %s is left for later: %s", document_id, error.message)
            self.leases.held.discard(document_id)
            return
        if not isinstance(error, GraphGateError):
            log.error("processing %s failed", document_id, exc_info=error)
        await self._fail(document_id, describe(error))

    async def _fail(self, document_id: str, message: str) -> None:
        log.warning("document %s failed: %s", document_id, message)
        try:
            with anyio.CancelScope(shield=True):
                await self.documents.set_status(document_id, "failed", message)
        except Exception as exc:  # noqa: BLE001 - this runs in the workers: it must never raise
            # the disk refuses even this (full): show the failure from memory; the stored row still
            # says unfinished, so a restart resumes the document
            reason = exc.message if isinstance(exc, StorageError) else f"{type(exc).__name__}: {exc}"
            log.warning("could not record that document %s failed: %s", document_id, reason)
            self.unrecorded_failures[document_id] = message
            return
        self.unrecorded_failures.pop(document_id, None)

    def as_known(self, document: dict[str, Any]) -> dict[str, Any]:
        """A stored document row as the pipeline knows it: still processing while its merge, committed
        to the tables, is being applied to the indexes and the graph (so "processed" means a chat
        can already find it); failed, if that failure could not be written; pending with the reason
        in its error field while the gate holds documents back."""
        if document["status"] == "processed" and document["id"] in self.merging:
            return {**document, "status": "processing"}
        message = self.unrecorded_failures.get(document["id"])
        if message is not None and document["status"] in ("pending", "processing"):
            return {**document, "status": "failed", "error": message}
        if self.gate.reason is not None and document["status"] == "pending":   # why it waits
            return {**document, "error": self.gate.reason}
        return document

    async def known_counts(self, counts: dict[str, int]) -> dict[str, int]:
        """Stored document counts by status as ``as_known`` shows each document, so that /rag/stats
        and /rag/health agree with /rag/documents (a failure the disk would not take, a merge
        still being applied)."""
        ids = [*self.unrecorded_failures, *self.merging]
        if not ids:
            return counts
        counts = dict(counts)
        for document in (await self.documents.get_many(ids)).values():
            known = self.as_known(document)["status"]
            if known != document["status"]:
                counts[document["status"]] -= 1
                counts[known] = counts.get(known, 0) + 1
        return counts

    async def stats(self) -> dict[str, Any]:
        """The store's counts, with documents as ``known_counts`` gives them."""
        stats = await self.store.stats()
        stats["documents"] = await self.known_counts(stats["documents"])
        return stats

    @property
    def busy(self) -> bool:
        """Documents are queued, being extracted or merged (background jobs give way to them)."""
        return bool(self.queued or self.running or self.merging)

    async def wait_idle(self) -> None:
        if self.busy:
            await self.idle.wait()

    # --- submitting, retrying, deleting ---

    async def submit(self, parsed: ParsedDocument,
                     metadata: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
        """Store the document durably and queue it; ("accepted" | "duplicate" | "replaced").
        ``metadata`` (checked by the caller): a new version without any keeps its older one's."""
        document_id = "doc-" + hashlib.sha256(parsed.text.encode()).hexdigest()
        pending = None
        keys = (document_id, parsed.name)
        # read before taking the lock (uploads in flight read side by side), and again under it
        # only if this content or name was stored meanwhile or is still on its way in
        seen = self.stored_seq
        existing, olders = await self.documents.and_versions(document_id, parsed.name)
        async with self.submit_lock:  # decisions one at a time: duplicates and versions are seen
            stale = seen < self._stored_forgotten or any(self._stored_at.get(key, -1) >= seen for key in keys)
            for key in keys:  # the same content or name still on its way in
                if key in self.inserting:
                    stale = True
                    with contextlib.suppress(Exception):  # its own upload reports its failure
                        await self.inserting[key].wait()
            if stale:
                existing, olders = await self.documents.and_versions(document_id, parsed.name)
            if existing is not None:
                return self.as_known(existing), "duplicate"
            if all(older["status"] == "processed" for older in olders):
                # the usual case: nothing to cancel, so no need to wait for a merge in progress
                # (that can take seconds of summaries and embeddings); the insert itself is
                # awaited outside the lock, so that uploads in flight together commit together
                record = {"id": document_id, "name": parsed.name, "mime": parsed.mime, "size": parsed.size,
                          "replaces": olders[-1]["id"] if olders else None, "created_at": now(),
                          "metadata": inherited(metadata, olders)}
                pending = self.upload_writer.submit((record, parsed.text))
                self.inserting[document_id] = self.inserting[parsed.name] = pending
            else:
                try:
                    async with self.merger.exclusive():  # an unfinished older version may be merging now
                        await self._insert(document_id, parsed, await self.documents.named(parsed.name),
                                           metadata)
                finally:
                    self._stored(keys)
        # shielded: an insert handed to the writer is committed even if this upload is cancelled,
        # and a committed document must be queued
        with anyio.CancelScope(shield=True):
            if pending is not None:
                try:
                    await pending.wait()
                finally:
                    for key in keys:
                        if self.inserting.get(key) is pending:
                            del self.inserting[key]
                    self._stored(keys)
            self._hand_over(document_id, parsed)
            self._enqueue(document_id)
        if pending is not None:  # the row as just committed: no need to read it back
            stored: dict[str, Any] | None = self.documents.new_row(record)
        else:
            stored = await self.documents.get(document_id)
        assert stored is not None
        document = stored
        return document, "replaced" if document.get("replaces") else "accepted"

    def _hand_over(self, document_id: str, parsed: ParsedDocument) -> None:
        """Keep the text of a document just stored for its worker, which then need not read it back
        (an id is the hash of its text, so the text kept for an id is always the right one)."""
        size = sys.getsizeof(parsed.text)  # 1, 2 or 4 bytes a character, as Python stores it
        if self._handed_bytes + size <= HANDOVER_BYTES:
            self._handed[document_id] = (parsed.name, parsed.text)
            self._handed_bytes += size

    def _take_handed(self, document_id: str) -> tuple[str, str] | None:
        handed = self._handed.pop(document_id, None)
        if handed is not None:
            self._handed_bytes -= sys.getsizeof(handed[1])
        return handed

    def _stored(self, keys: tuple[str, ...]) -> None:
        """Note that documents with these ids or names were written (or tried), for uploads that
        read before this happened."""
        if len(self._stored_at) > 100_000:  # forget old entries: reads from before then read again
            self._stored_at.clear()
            self._stored_forgotten = self.stored_seq
        for key in keys:
            self._stored_at[key] = self.stored_seq
        self.stored_seq += 1

    async def _insert(self, document_id: str, parsed: ParsedDocument, olders: list[dict[str, Any]],
                      metadata: dict[str, Any] | None) -> None:
        kept = inherited(metadata, olders)
        replaces = None
        for older in olders:
            if older["status"] == "processed":
                replaces = older["id"]
            else:  # an unfinished older version has contributed nothing: drop it
                self._cancel(older["id"])
                await self.documents.delete_unprocessed(older["id"])
        record = {"id": document_id, "name": parsed.name, "mime": parsed.mime, "size": parsed.size,
                  "replaces": replaces, "metadata": kept}
        await self.documents.insert(record, parsed.text)

    async def retry(self, document_id: str) -> dict[str, Any]:
        document = await self.get(document_id)
        if document["status"] != "failed":
            raise Conflict(f"document {document_id} is {document['status']}; only failed documents can be retried")
        await self.documents.set_status(document_id, "pending", None)
        self._stored((document_id, document["name"]))
        self._enqueue(document_id)
        return await self.get(document_id)

    async def delete(self, document_id: str) -> dict[str, Any]:
        """Remove the document; names that lose every source go, the rest are rebuilt (no extraction)."""
        document = await self.get(document_id)
        self._cancel(document_id)
        async with self.merger.exclusive():
            removed = await self.documents.orphaned_chunks(document_id, [])
            graph = await self.integrator.changes({}, set(removed))
            changes = Changeset(chunks_removed=removed, documents_removed=[document_id],
                                entities_upserted=graph.entities, entities_removed=graph.entities_removed,
                                relations_upserted=graph.relations, relations_removed=graph.relations_removed,
                                cache_entries=graph.cache_entries,
                                curation=Curation(resolved_into_dropped=list(graph.entities_removed)))
            await self.store.apply(changes)
            self._stored((document_id, document["name"]))  # uploads that read before this read again
        return {"document": document, "chunks_removed": len(removed),
                "entities_removed": len(graph.entities_removed), "entities_updated": len(graph.entities),
                "relations_removed": len(graph.relations_removed), "relations_updated": len(graph.relations)}

    def _cancel(self, document_id: str) -> None:
        self.queued.pop(document_id, None)
        self._take_handed(document_id)
        for table in (self.running, self.merging):
            if document_id in table:
                table[document_id].scope.cancel()

    async def get(self, document_id: str) -> dict[str, Any]:
        document = await self.documents.get(document_id)
        if document is None:
            raise NotFound(f"document {document_id} not found")
        return self.as_known(document)

    # --- processing one document ---

    async def _extract_document(self, work: Work) -> None:
        documents = self.documents
        handed = self._take_handed(work.document_id)
        work.resumed = handed is None
        if handed is None:  # resumed after a restart, retried, or its text was too much to keep
            document, text = await documents.with_text(work.document_id)
            if document is None:
                raise NotFound(f"document {work.document_id} not found")
            handed = document["name"], text
        work.name, text = handed
        work.phase = "chunking"

        def chunk_and_look_up() -> tuple[list[Chunk], set[str]]:  # one worker thread for both
            chunks = chunk_text(text, self.tokenizer, size=self.settings.chunk_tokens,
                                overlap=self.settings.chunk_overlap)
            return chunks, documents.extracted_ids_sync(list({c.id: None for c in chunks}))

        work.chunks, done = await anyio.to_thread.run_sync(chunk_and_look_up)
        unique = list({c.id: c for c in work.chunks}.values())
        self._count_recording(work, unique, done)
        work.phase, work.total, work.done = "extracting", len(unique), len(done)
        # not awaited: extraction starts at once (the store may be busy with a merge); the record
        # commits before any of this document's extraction records, and the merger waits for it
        work.commits.append(self.status_writer.submit((work.document_id, len(unique), len(done))))
        async with anyio.create_task_group() as group:
            for chunk in unique:
                if chunk.id not in done:
                    group.start_soon(self._extract_chunk, work, chunk)

    async def _extract_chunk(self, work: Work, chunk: Chunk) -> None:
        extraction = await extract_chunk(self.models, self.settings, chunk, save=self._save_reply,
                                         resumed=work.resumed)
        result, raw, entries, hits = extraction.result, extraction.raw, extraction.entries, extraction.hits
        model = entries[0].model if entries else (hits[0].model if hits else "")
        # not awaited here: the worker moves on to its next document while the record is committed;
        # the merger waits for the document's commits before merging it
        recorded = self.extraction_writer.submit(
            ExtractionRecord(work.document_id, chunk.id, model, result.to_json(), raw, entries, hits))
        work.commits.append(recorded)
        self.recording[chunk.id] = recorded
        work.done += 1
        self.finished.append((time.monotonic(), 1))

    def _count_recording(self, work: Work, chunks: list[Chunk], done: set[str]) -> None:
        """The chunks this process extracted whose records are not committed yet count as done: the
        document's merge waits for those records (its ``commits``). A failed record does not count."""
        for chunk in chunks:
            pending = self.recording.get(chunk.id)
            if chunk.id not in done and pending is not None and pending.outcome() is not False:
                done.add(chunk.id)
                work.commits.append(pending)
        self.recording = {key: pending for key, pending in self.recording.items() if pending.outcome() is None}

    def _save_reply(self, entry: CacheEntry) -> None:
        """Commit an answered extraction pass now (not awaited: the next pass goes on meanwhile;
        should it fail, the chunk's record still carries the entry)."""
        self.reply_writer.submit(entry)

    # --- status ---

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        recent = sum(n for t, n in self.finished if now - t <= 60)
        return {
            "queued": list(self.queued),
            "running": [{"id": w.document_id, "name": w.name, "phase": w.phase, "done": w.done, "total": w.total,
                         "seconds": round(now - w.started, 1)}
                        for w in (*self.running.values(), *self.merging.values())],
            "chunks_per_minute": recent,
            "llm": {"capacity": self.models.limiter.capacity, "busy": self.models.limiter.running,
                    "waiting": self.models.limiter.waiting, "calls": dict(self.models.calls),
                    "embed_capacity": self.models.embed_limiter.capacity,
                    "embed_busy": self.models.embed_limiter.running,
                    "embed_waiting": self.models.embed_limiter.waiting},
        }


def inherited(metadata: dict[str, Any] | None, olders: list[dict[str, Any]]) -> dict[str, Any]:
    """A document's metadata: as given, else (a new version given none) its newest older version's."""
    if metadata:
        return metadata
    return dict(olders[-1].get("metadata") or {}) if olders else {}
