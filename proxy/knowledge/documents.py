"""Documents as the knowledge service offers them (``knowledge.documents``): upload, list, read,
retry and delete, the pipeline's progress, and the store's health as /rag/health reports it.

Rows are shown as the pipeline knows them (``Pipeline.as_known``): still processing while a
committed merge is being applied, failed when the disk would not take the failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from proxy.core.errors import BadRequest, NotFound
from proxy.core.metadata import Filter, check_metadata
from proxy.extraction.results import ExtractionResult
from proxy.ingest.pipeline import Pipeline
from proxy.parsing.files import ParsedDocument
from proxy.store.protocols.documents import STATUSES, StorageCondition, StorageHealth
from proxy.store.store import KnowledgeStore


@dataclass
class HealthProbe:
    """What /rag/health reports of the store: its condition, and (when it answered in time and
    could be read) the documents by status as /rag/documents shows them, writability and free
    space; else whether it was too busy or the error it raised."""
    condition: StorageCondition
    unrecorded_failures: int
    health: StorageHealth | None = None
    busy: bool = False  # it did not answer within the time allowed
    error: BaseException | None = None  # it could not be read
    lost: bool = False  # with ``error``: the store is unusable now (its engine gave up on it)


class DocumentService:
    def __init__(self, store: KnowledgeStore, pipeline: Pipeline,
                 community_job: Callable[[], dict[str, Any]] | None = None) -> None:
        self.store = store
        self.pipeline = pipeline
        self.community_job = community_job   # the community summaries' state, for the stats
        self.tables = store.tables.documents

    # --- uploading, retrying, deleting ---

    async def submit(self, parsed: ParsedDocument, metadata: Any = None) -> tuple[dict[str, Any], str]:
        """Store the parsed document and queue it: (its row, "accepted" | "duplicate" | "replaced").
        ``metadata``: a JSON object (or its text) of string keys and string/number/list values,
        checked here (400 when bad); a new version given none keeps the older one's; a duplicate's
        stays as it was."""
        row, outcome = await self.pipeline.submit(parsed, check_metadata(metadata))
        return self.pipeline.as_known(row), outcome

    async def set_metadata(self, document_id: str, metadata: Any) -> dict[str, Any]:
        """Replace the document's metadata (checked: 400 when bad; 404 for no such document). The
        next filtered retrieval sees it."""
        checked = check_metadata(metadata)
        await self.get(document_id)   # NotFound before anything is written
        row = await self.tables.set_metadata(document_id, checked)
        if row is None:   # deleted meanwhile
            raise NotFound(f"document {document_id} not found")
        return self.pipeline.as_known(row)

    async def retry(self, document_id: str) -> dict[str, Any]:
        return await self.pipeline.retry(document_id)

    async def delete(self, document_id: str) -> dict[str, Any]:
        """Remove the document and what only it sourced: what went and what was updated."""
        return await self.pipeline.delete(document_id)

    async def deletion_effects(self, document_id: str) -> dict[str, int]:
        """What deleting the document would remove and what it would only update."""
        return await self.tables.deletion_effects(document_id)

    # --- reading ---

    @staticmethod
    def check_status(status: str | None) -> None:
        if status is not None and status not in STATUSES:
            raise BadRequest(f"status must be one of {', '.join(STATUSES)}")

    async def page(self, *, status: str | None, search: str | None, sort: str, descending: bool, limit: int,
                   offset: int, where: Filter | None = None) -> tuple[list[dict[str, Any]], int]:
        """One page of documents (filtered by status, a name search and a metadata filter) and how
        many match."""
        self.check_status(status)
        ids = None
        if where is not None:   # matched in a worker thread: thousands of documents take milliseconds
            known = await self.tables.metadata_of()
            ids = await anyio.to_thread.run_sync(
                lambda: [i for i, (name, values) in known.items() if where.matches(name, values)])
        rows, total = await self.tables.page(status=status, search=search, sort=sort, descending=descending,
                                             limit=limit, offset=offset, ids=ids)
        return [self.pipeline.as_known(r) for r in rows], total

    async def get(self, document_id: str) -> dict[str, Any]:
        """The document (NotFound if there is none)."""
        return await self.pipeline.get(document_id)

    async def counts(self, document_id: str) -> dict[str, int]:
        """Chunks, entities and relations the document's chunks source."""
        return await self.tables.counts(document_id)

    async def entity_counts(self, document_ids: list[str]) -> dict[str, int]:
        return await self.tables.entity_counts(document_ids)

    async def chunks(self, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of the document's chunks in order, each with the entities and relations extracted
        from it, and their number."""
        rows, total = await self.tables.chunks(document_id, limit, offset)
        out = []
        for row in rows:
            extracted = ExtractionResult.from_json(row["result"]) if row["result"] else None
            out.append({"ord": row["ord"], "id": row["id"], "content": row["content"], "tokens": row["tokens"],
                        "entities": extracted.entities if extracted else [],
                        "relations": extracted.relations if extracted else []})
        return out, total

    # --- progress and counts ---

    def status(self) -> dict[str, Any]:
        """The pipeline's work: queued and running documents, rates, the model limiters."""
        return self.pipeline.status()

    async def stats(self) -> dict[str, Any]:
        """The store's counts, documents counted as /rag/documents shows them, and the community
        summaries' job."""
        stats = await self.pipeline.stats()
        if self.community_job is not None:
            stats["communities"]["job"] = self.community_job()
        return stats

    async def wait_idle(self) -> None:
        await self.pipeline.wait_idle()

    # --- health ---

    def condition(self) -> StorageCondition:
        """Whether the store is usable right now (and why not), how often it was reopened."""
        return self.tables.condition()

    async def probe(self, seconds: float, limiter: anyio.CapacityLimiter) -> HealthProbe:
        """The store's health for /rag/health. The probe runs in a worker thread it abandons after
        ``seconds`` (a long checkpoint): that thread finishes on its own and holds ``limiter`` until
        then, so during a long stall later probes wait for it (no thread of theirs), then say "busy"."""
        condition = self.tables.condition()
        unrecorded = len(self.pipeline.unrecorded_failures)
        try:
            with anyio.fail_after(seconds):
                health = await anyio.to_thread.run_sync(self.tables.health_sync, abandon_on_cancel=True,
                                                        limiter=limiter)
        except TimeoutError:
            return HealthProbe(condition, unrecorded, busy=True)
        except self.tables.read_errors as exc:
            return HealthProbe(condition, unrecorded, error=exc, lost=self.tables.condition().failure is not None)
        total = health.documents.pop("total")
        health.documents = {**await self.pipeline.known_counts(health.documents), "total": total}
        return HealthProbe(condition, unrecorded, health=health)
