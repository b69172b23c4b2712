"""Following the other replicas' commits: a connection of its own LISTENs on the change channel and
wakes the store, which reads the change log from its generation on (``KnowledgeStore.follow``).

The log is the truth and a notification only a wake-up (0.05-0.08 ms from commit to listener here,
docs/postgresql.md, measurements): the store also reads the log every POLL_SECONDS, and right after
(re)connecting, so a notification lost while the connection was down costs at most that delay.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import psycopg

from proxy.core.errors import GraphGateError
from proxy.store.postgres.commit import CHANNEL

log = logging.getLogger("graphgate.store")

POLL_SECONDS = 2.0
RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)   # between attempts to reconnect, then every 5 s


async def listen(dsn: str, schema: str, on_change: Callable[[], Awaitable[object]]) -> None:
    """Until cancelled: ``on_change()`` on each notification naming ``schema``, on every poll, and
    after each (re)connection."""
    failures = 0
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as con:
                await con.execute(f"LISTEN {CHANNEL}")
                if failures:
                    log.info("following the other replicas' commits again (%s)", schema)
                failures = 0
                await on_change()
                while True:
                    async for note in con.notifies(timeout=POLL_SECONDS):
                        if note.payload.partition(":")[0] == schema:
                            await on_change()
                    await on_change()
        except (psycopg.OperationalError, OSError, GraphGateError) as exc:
            # GraphGateError: the store's own read gave up (the server away past its retries)
            if not failures:
                log.warning("lost the PostgreSQL connection that follows other replicas' commits (%s); "
                            "reconnecting", str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            await anyio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
            failures += 1
