"""The console playground's pending answers on the PostgreSQL server (``proxy/control/pending.py``):
one table every replica shares, a row taken with ``DELETE ... RETURNING`` so that an answer is
streamed once whichever replica is asked."""

from __future__ import annotations

import json

import anyio.to_thread
import psycopg

from proxy.control.pending import TTL_SECONDS, PendingAnswer
from proxy.store.postgres.connection import CONNECT_SECONDS, storage_error

TABLE = "public.graphgate_pending_answers"
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    token text PRIMARY KEY,
    session text,
    model text NOT NULL,
    messages jsonb NOT NULL,
    expires timestamp NOT NULL
)"""
NOW = "timezone('utc', now())"


class PgPendingAnswers:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._ready = False

    def _connect(self) -> psycopg.Connection:
        try:
            con = psycopg.connect(self.dsn, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
            if not self._ready:
                with con.transaction():
                    con.execute("SELECT pg_advisory_xact_lock(hashtext('graphgate-migrate'))")
                    con.execute(CREATE)
                self._ready = True
            return con
        except psycopg.OperationalError as exc:
            raise storage_error(exc) from exc

    def _put_sync(self, token: str, pending: PendingAnswer) -> None:
        with self._connect() as con:
            con.execute(f"DELETE FROM {TABLE} WHERE expires <= {NOW}")
            con.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, {NOW} + make_interval(secs => %s))",
                        [token, pending.session, pending.model, json.dumps(pending.messages), TTL_SECONDS])

    def _take_sync(self, token: str) -> PendingAnswer | None:
        with self._connect() as con:
            row = con.execute(f"DELETE FROM {TABLE} WHERE token = %s AND expires > {NOW} "
                              "RETURNING session, model, messages", [token]).fetchone()
        return PendingAnswer(row[0], row[1], row[2]) if row else None

    async def put(self, token: str, pending: PendingAnswer) -> None:
        await anyio.to_thread.run_sync(self._put_sync, token, pending)

    async def take(self, token: str) -> PendingAnswer | None:
        return await anyio.to_thread.run_sync(self._take_sync, token)
