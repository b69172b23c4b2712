"""The community summaries' rows over either backend's SQL (``CommunityTables``,
proxy/store/protocols/communities.py): the adapter is one; each backend subclasses it with its
statements (``sql``: its module)."""

from __future__ import annotations

from types import ModuleType

from proxy.store.protocols.communities import StoredCommunity
from proxy.store.sql_runner import Runner


class SqlCommunities:
    """``CommunityTables`` over a backend's statements."""

    sql: ModuleType   # the backend's statements: ``fn(connection, *args)``

    def __init__(self, db: Runner) -> None:
        self.db = db

    def digests_sync(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return self.db.read_sync(self.sql.digests)

    def by_keys_sync(self, keys: list[int]) -> dict[int, StoredCommunity]:
        return self.db.read_sync(self.sql.by_keys, keys)
