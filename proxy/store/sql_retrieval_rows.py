"""The texts retrieval reads per turn, over either backend's SQL: the adapter is one; each backend
subclasses it with its statements (``sql``: its module)."""

from __future__ import annotations

from types import ModuleType

from proxy.store.sql_runner import Runner


class SqlRetrievalRows:
    """Descriptions, chunk texts and extraction results by key, over a backend's statements."""

    sql: ModuleType   # the backend's statements: ``fn(connection, *args)``

    def __init__(self, db: Runner) -> None:
        self.db = db

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        return self.db.read_sync(self.sql.descriptions, table, wanted)

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]:
        return self.db.read_sync(self.sql.chunk_texts, keys)

    def extractions_sync(self, chunk_ids: list[str]) -> dict[str, str]:
        return self.db.read_sync(self.sql.extractions, chunk_ids)
