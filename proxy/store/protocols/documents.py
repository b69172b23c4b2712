"""The documents' tables: uploaded documents, their progress through the pipeline, the chunks they
link to and the extractions stored for those chunks. A backend implements ``DocumentTables``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from proxy.core.llm_cache import CacheEntry

STATUSES = ("pending", "processing", "processed", "failed")
SORTS = ("name", "created_at", "updated_at", "size", "status", "chunks_total")

Item_contra = TypeVar("Item_contra", contravariant=True)

# a document to insert: {"id", "name", "mime", "size", "replaces", "created_at"?} and its text
NewDocument = tuple[dict[str, Any], str]
# a document starting extraction: (id, chunks in all, chunks already extracted)
Started = tuple[str, int, int]


class ExtractionRecord(NamedTuple):
    """A chunk's finished extraction, with the LLM cache entries it made and used."""
    document_id: str
    chunk_id: str
    model: str
    result: str  # ExtractionResult as JSON
    raw: list[str]  # the model's replies
    entries: list[CacheEntry]
    hits: list[CacheEntry]


@dataclass
class StorageHealth:
    """What /rag/health reports of the tables: documents by status (with ``total``), whether the
    data directory takes writes, its free bytes (None: a server store, whose disk a client cannot
    see) and, where the backend can tell, the bytes the knowledge base's tables take."""
    documents: dict[str, int]
    writable: bool
    free_bytes: int | None
    stored_bytes: int | None = None


@dataclass
class StorageCondition:
    """Whether the tables' engine is usable right now (``failure`` says why not) and how often it
    was reopened after it gave up on the database."""
    failure: str | None
    reopened: int


class Committed(Protocol):
    async def wait(self) -> None:
        """Returns once the item is committed; raises the commit's error if it failed."""

    def outcome(self) -> bool | None:
        """None while the item waits; then whether its commit succeeded."""


class Writer(Protocol[Item_contra]):
    def submit(self, item: Item_contra) -> Committed: ...


class IngestWrites(Protocol):
    """The pipeline's small writes, sharing transactions: items that wait together commit together,
    in this order (uploads, "processing" statuses, answered replies, finished extractions)."""
    @property
    def uploads(self) -> Writer[NewDocument]: ...
    @property
    def starts(self) -> Writer[Started]: ...
    @property
    def replies(self) -> Writer[CacheEntry]: ...
    @property
    def extractions(self) -> Writer[ExtractionRecord]: ...

    async def run(self) -> None:
        """Commit what is submitted until cancelled (then what was handed over, before returning)."""


class DocumentTables(Protocol):
    metadata_version: int   # moves on with every metadata edit (what filters matched may change)

    # --- reading documents (rows are plain dicts; timestamps as ISO strings) ---
    async def get(self, document_id: str) -> dict[str, Any] | None: ...
    async def get_many(self, document_ids: list[str]) -> dict[str, dict[str, Any]]: ...
    async def with_text(self, document_id: str) -> tuple[dict[str, Any] | None, str]: ...
    async def named(self, name: str) -> list[dict[str, Any]]:
        """Documents with this name, oldest first."""
    async def and_versions(self, document_id: str, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The document with this id, if stored, and the other documents with this name (oldest first)."""
    async def page(self, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
        """A page of documents (``ids``: only these) and how many match."""
    async def unfinished_ids(self) -> list[str]: ...
    def new_row(self, record: dict[str, Any]) -> dict[str, Any]:
        """The row ``uploads`` stores for ``record`` (with its ``created_at``), as ``get`` reads it."""

    # --- writing documents ---
    async def insert(self, record: dict[str, Any], text: str) -> None: ...
    async def delete_unprocessed(self, document_id: str) -> None: ...
    async def set_metadata(self, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the document's metadata; its row (None: no such document). Moves
        ``metadata_version`` on."""
    async def searchable_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, metadata) of every processed document (retrieval's filters match against them)."""
    async def metadata_of(self, ids: list[str] | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """id -> (name, metadata) of these documents (all when None)."""
    async def set_status(self, document_id: str, status: str, error: str | None = None) -> None: ...
    async def start(self, items: list[Started]) -> None:
        """Mark documents still on their way processing, with their chunk counts."""
    def ingest_writes(self) -> IngestWrites: ...

    # --- chunks and extractions of documents ---
    def extracted_ids_sync(self, chunk_ids: list[str]) -> set[str]:
        """The chunks among ``chunk_ids`` whose extraction is stored. Blocking (worker threads)."""
    async def stored_chunk_ids(self, chunk_ids: list[str]) -> set[str]: ...
    async def orphaned_chunks(self, document_id: str, keep: list[str]) -> list[str]:
        """Chunks of the document that no other document links to and that are not in ``keep``."""
    async def counts(self, document_id: str) -> dict[str, int]:
        """Chunks, entities and relations the document's chunks source."""
    async def entity_counts(self, document_ids: list[str]) -> dict[str, int]: ...
    async def chunks(self, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of the document's chunks in order ({ord, id, content, tokens, result}: ``result``
        the stored extraction as JSON, or None) and their number."""
    async def deletion_effects(self, document_id: str) -> dict[str, int]:
        """What deleting the document would remove and what it would only update."""

    # --- health ---
    @property
    def read_errors(self) -> tuple[type[BaseException], ...]:
        """What a read raises when the tables cannot be read."""
    def health_sync(self) -> StorageHealth:
        """Blocking: a health probe runs it in a worker thread it may abandon."""
    def condition(self) -> StorageCondition: ...
