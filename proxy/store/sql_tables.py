"""The tables core over either backend (``Tables``, proxy/store/protocols/tables.py): the subjects,
one object each, and the reads the store keeps itself in step with, where the engines do not part.
A backend (``duckdb/tables.py``, ``postgres/tables.py``) opens its database, names its own
subjects' classes and adds what it does its own way: the start-up load, the counts, the commit."""

from __future__ import annotations

from proxy.store.protocols.cache import CacheTables
from proxy.store.protocols.communities import CommunityTables
from proxy.store.protocols.documents import DocumentTables
from proxy.store.protocols.graph_rows import GraphRows
from proxy.store.protocols.reembed import ReembedTables
from proxy.store.protocols.retrieval_rows import RetrievalRows
from proxy.store.protocols.traces import TraceTables
from proxy.store.rows_memory import MemoryRows
from proxy.store.sql_communities import SqlCommunities
from proxy.store.sql_memory_load import load_chunk_documents
from proxy.store.sql_meta import get_meta
from proxy.store.sql_retrieval_rows import SqlRetrievalRows
from proxy.store.sql_runner import SqlAdapter
from proxy.store.sql_traces import SqlTraces


class SqlTables(SqlAdapter):
    """What both backends' tables share (see the module's docstring)."""

    def subjects(self, *, documents: DocumentTables, cache: CacheTables, graph_rows: GraphRows,
                 reembed: ReembedTables) -> None:
        """The subjects, one object each (their protocols are in proxy/store/protocols/): the
        backend's own, and those written once."""
        self.documents = documents
        self.cache = cache
        self.graph_rows = graph_rows
        self.reembed = reembed
        self.traces: TraceTables = SqlTraces(self.db)
        self.retrieval_rows: RetrievalRows = SqlRetrievalRows(self.db)
        self.communities: CommunityTables = SqlCommunities(self.db)

    def meta_sync(self, key: str, default: str | None = None) -> str | None:
        return self.read_sync(get_meta, key, default)

    async def meta(self, key: str, default: str | None = None) -> str | None:
        return await self.read(get_meta, key, default)

    def load_chunk_documents_sync(self, rows: MemoryRows, chunk_ids: list[str]) -> None:
        self.read_sync(load_chunk_documents, rows, chunk_ids)
