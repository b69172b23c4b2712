"""The community summaries' rows (``CommunityTables``, proxy/store/protocols/communities.py) over
either backend, written once in the SQL both engines speak (proxy/store/sql_dialect.py)."""

from __future__ import annotations

from proxy.store.protocols.communities import StoredCommunity
from proxy.store.sql_dialect import Sql
from proxy.store.sql_runner import SqlAdapter


def digests(sql: Sql) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {r[0]: (r[1], tuple(r[2])) for r in sql.execute("SELECT id, digest, members FROM communities").fetchall()}


def by_keys(sql: Sql, keys: list[int]) -> dict[int, StoredCommunity]:
    """By vector key, through the key index (a question reads a handful)."""
    if not keys:
        return {}
    rows = sql.execute(f"SELECT id, key, title, summary, members FROM communities WHERE {sql.among('key', 'bigint')}",
                       [[int(key) for key in keys]]).fetchall()
    return {r[1]: StoredCommunity(r[0], r[1], r[2], r[3], tuple(r[4])) for r in rows}


class SqlCommunities(SqlAdapter):
    """``CommunityTables`` over either backend."""

    def digests_sync(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return self.read_sync(digests)

    def by_keys_sync(self, keys: list[int]) -> dict[int, StoredCommunity]:
        return self.read_sync(by_keys, keys)
