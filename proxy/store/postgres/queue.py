"""The ingestion queue several replicas share: unfinished documents are claimed with a lease
(``lease_owner``, ``lease_until`` on ``documents``) that the claiming replica renews while it works
on them. A replica that dies stops renewing, its leases run out, and another replica claims its
documents; the chunks it had extracted are stored, so they are not sent to the model again.
Times are the server's (``timezone('utc', now())``), so replicas' clocks do not matter. Each claim
or renewal is one statement in autocommit: atomic without waiting for the base's commit lock."""

from __future__ import annotations

from proxy.store.postgres.connection import Con, PgDatabase

UNFINISHED = "status IN ('pending', 'processing')"
FREE = "(lease_owner IS NULL OR lease_until < timezone('utc', now()))"
UNTIL = "timezone('utc', now()) + make_interval(secs => %s)"


class PgDocumentQueue:
    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def claim(self, document_id: str, owner: str, seconds: float) -> bool:
        """Take ``document_id`` unless another replica's lease on it is running."""
        def claim(con: Con) -> bool:
            return con.execute(f"UPDATE documents SET lease_owner = %s, lease_until = {UNTIL} "
                               f"WHERE id = %s AND {UNFINISHED} AND ({FREE} OR lease_owner = %s) RETURNING id",
                               [owner, seconds, document_id, owner]).fetchone() is not None
        return await self.db.read(claim)

    async def claim_next(self, owner: str, seconds: float, limit: int) -> list[str]:
        """Up to ``limit`` unfinished documents no replica holds, oldest first (rows another replica
        is claiming at this moment are skipped, not waited for)."""
        def claim(con: Con) -> list[str]:
            return [row[0] for row in con.execute(
                f"UPDATE documents SET lease_owner = %s, lease_until = {UNTIL} WHERE id IN ("
                f"SELECT id FROM documents WHERE {UNFINISHED} AND {FREE} ORDER BY created_at, id LIMIT %s "
                "FOR UPDATE SKIP LOCKED) RETURNING id", [owner, seconds, limit]).fetchall()]
        if limit <= 0:
            return []
        return await self.db.read(claim)

    async def renew(self, owner: str, document_ids: list[str], seconds: float) -> list[str]:
        """Extend this replica's leases on ``document_ids``; the ids it still holds."""
        def renew(con: Con) -> list[str]:
            return [row[0] for row in con.execute(
                f"UPDATE documents SET lease_until = {UNTIL} WHERE lease_owner = %s AND id = ANY(%s) RETURNING id",
                [seconds, owner, document_ids]).fetchall()]
        if not document_ids:
            return []
        return await self.db.read(renew)
