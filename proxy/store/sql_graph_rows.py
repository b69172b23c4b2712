"""The graph's rows over either backend's SQL (``GraphRows``, proxy/store/protocols/graph_rows.py): the adapter
is one; each backend subclasses it with its statements (``sql``: its module)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from proxy.store.clock import now
from proxy.store.protocols.graph_rows import StoredEdits, StoredEntity, StoredRelation, StoredRow, Subject
from proxy.store.sql_retrieval_rows import descriptions
from proxy.store.sql_runner import Runner


class SqlGraphRows:
    """``GraphRows`` over a backend's statements."""

    sql: ModuleType   # the backend's statements: ``fn(connection, *args)``

    def __init__(self, db: Runner) -> None:
        self.db = db
        self.dialect = db.dialect

    async def aliases(self) -> dict[str, str]:
        return await self.db.read(self.sql.load_aliases)

    def aliases_sync(self) -> dict[str, str]:
        return self.db.read_sync(self.sql.load_aliases)

    async def touched_by(self, chunk_ids: list[str]) -> tuple[set[str], set[str]]:
        return await self.db.read(self.sql.touched_by, chunk_ids)

    async def stored_rows(self, subject: Subject, keys: list[str]) -> dict[str, StoredRow]:
        return await self.db.read(self.sql.stored_rows, subject, keys)

    async def embeddings(self, subject: Subject, keys: list[str]) -> np.ndarray:
        return await self.db.read(self.sql.embeddings_by, subject, keys)

    async def extractions(self, chunk_ids: list[str]) -> dict[str, str]:
        return await self.db.read(self.sql.extraction_results, chunk_ids)

    async def edits(self, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits:
        return await self.db.read(self.sql.load_edits, entity_keys, pair_keys)

    async def entities(self, keys: list[str]) -> dict[str, StoredEntity]:
        return await self.db.read(self.sql.entity_rows, keys)

    async def relations_touching(self, keys: list[str]) -> list[StoredRelation]:
        return await self.db.read(self.sql.relations_touching, keys)

    async def relation(self, pair: str) -> StoredRelation | None:
        return await self.db.read(self.sql.relation_row, pair)

    def dismissed_sync(self) -> set[str]:
        return self.db.read_sync(self.sql.dismissed)

    async def dismiss(self, pair: str) -> None:
        await self.db.write(self.sql.dismiss, pair, now())

    async def alias_target(self, key: str) -> str | None:
        return await self.db.read(self.sql.alias_target, key)

    async def resolve_name(self, key: str) -> str | None:
        return await self.db.read(self.sql.resolve_name, key)

    async def matching_keys(self, search: str, kind: str) -> list[str]:
        return await self.db.read(self.sql.matching_keys, search, kind)

    async def names_page(self, search: str, kind: str, descending: bool, limit: int,
                         offset: int) -> tuple[list[str], int]:
        return await self.db.read(self.sql.names_page, search, kind, descending, limit, offset)

    async def entity_types(self) -> list[tuple[str, int]]:
        return await self.db.read(self.sql.entity_types)

    async def entity_detail(self, key: str, shown_chunks: int) -> dict[str, Any] | None:
        return await self.db.read(self.sql.entity_detail, key, shown_chunks)

    async def descriptions(self, subject: Subject, wanted: list[tuple[int, str]]) -> dict[int, str]:
        return await self.db.read(self.dialect.bind(descriptions), subject, wanted)
