"""The documents' tables over either backend's SQL (``DocumentTables``, proxy/store/protocols/documents.py):
the adapter is one; each backend subclasses it with its statements (``sql``: its module of
``fn(connection, *args)``), its engine's errors, its ingestion writes and its health."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from proxy.store.protocols.documents import Started, StorageCondition, StorageHealth
from proxy.store.sql_runner import Runner


class SqlDocuments:
    """``DocumentTables`` over a backend's statements (see the module's docstring)."""

    sql: ModuleType                                  # the backend's statements
    read_errors: tuple[type[BaseException], ...]     # the engine's errors a read may raise

    def __init__(self, db: Runner) -> None:
        self.db = db
        self.metadata_version = 0   # moves on with every metadata edit (filters' caches key on it)

    async def get(self, document_id: str) -> dict[str, Any] | None:
        return await self.db.read(self.sql.get_document, document_id)

    async def get_many(self, document_ids: list[str]) -> dict[str, dict[str, Any]]:
        return await self.db.read(self.sql.get_documents, document_ids)

    async def with_text(self, document_id: str) -> tuple[dict[str, Any] | None, str]:
        return await self.db.read(self.sql.document_with_text, document_id)

    async def named(self, name: str) -> list[dict[str, Any]]:
        return await self.db.read(self.sql.documents_named, name)

    async def and_versions(self, document_id: str, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        return await self.db.read(self.sql.document_and_versions, document_id, name)

    async def page(self, *, status: str | None, search: str | None, sort: str, descending: bool,
                   limit: int, offset: int, ids: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
        return await self.db.read(lambda con: self.sql.list_documents(con, status=status, search=search, sort=sort,
                                                             descending=descending, limit=limit, offset=offset,
                                                             ids=ids))

    async def unfinished_ids(self) -> list[str]:
        return await self.db.read(self.sql.unfinished_ids)

    def new_row(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.sql.new_document_row(record)

    async def insert(self, record: dict[str, Any], text: str) -> None:
        await self.db.write(self.sql.insert_documents, [(record, text)])

    async def delete_unprocessed(self, document_id: str) -> None:
        await self.db.write(self.sql.delete_unprocessed, document_id)

    async def set_metadata(self, document_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return await self.db.write(self.sql.set_metadata, document_id, metadata)
        finally:
            self.metadata_version += 1

    async def searchable_metadata(self) -> list[tuple[str, dict[str, Any]]]:
        return await self.db.read(self.sql.searchable_metadata)

    async def metadata_of(self, ids: list[str] | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        return await self.db.read(self.sql.metadata_of, ids)

    async def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        await self.db.write(self.sql.set_status, document_id, status, error)

    async def start(self, items: list[Started]) -> None:
        await self.db.write(self.sql.start_documents, items)

    def extracted_ids_sync(self, chunk_ids: list[str]) -> set[str]:
        return self.db.read_sync(self.sql.extracted_ids, chunk_ids)

    async def stored_chunk_ids(self, chunk_ids: list[str]) -> set[str]:
        return await self.db.read(self.sql.stored_chunk_ids, chunk_ids)

    async def orphaned_chunks(self, document_id: str, keep: list[str]) -> list[str]:
        return await self.db.read(self.sql.orphaned_chunks, document_id, keep)

    async def counts(self, document_id: str) -> dict[str, int]:
        return await self.db.read(self.sql.document_counts, document_id)

    async def entity_counts(self, document_ids: list[str]) -> dict[str, int]:
        return await self.db.read(self.sql.entity_counts, document_ids)

    async def chunks(self, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        return await self.db.read(self.sql.document_chunks, document_id, limit, offset)

    async def deletion_effects(self, document_id: str) -> dict[str, int]:
        return await self.db.read(self.sql.deletion_effects, document_id)

    def ingest_writes(self) -> Any:
        raise NotImplementedError

    def health_sync(self) -> StorageHealth:
        raise NotImplementedError

    def condition(self) -> StorageCondition:
        raise NotImplementedError
