"""The PostgreSQL side of ``CommunityTables`` (proxy/store/protocols/communities.py)."""

from __future__ import annotations

import sys

from proxy.store.postgres.connection import Con, PgDatabase
from proxy.store.protocols.communities import StoredCommunity
from proxy.store.sql_communities import SqlCommunities


def digests(con: Con) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {r[0]: (r[1], tuple(r[2])) for r in con.execute("SELECT id, digest, members FROM communities").fetchall()}


def by_keys(con: Con, keys: list[int]) -> dict[int, StoredCommunity]:
    """By vector key, through the key index (a question reads a handful)."""
    if not keys:
        return {}
    rows = con.execute("SELECT id, key, title, summary, members FROM communities WHERE key = ANY(%s::bigint[])",
                       [[int(key) for key in keys]]).fetchall()
    return {r[1]: StoredCommunity(r[0], r[1], r[2], r[3], tuple(r[4])) for r in rows}


class PgCommunities(SqlCommunities):
    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db
