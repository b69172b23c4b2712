"""This replica's share of the ingestion queue on a store several replicas share
(``proxy/store/postgres/queue.py``): a document is worked on only once claimed, the claims are
renewed while the work goes on, and a replica with idle workers claims the documents no live replica
holds (new ones, and those of a replica that died: its leases ran out)."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable, Collection

import anyio

from proxy.core.errors import GraphGateError
from proxy.store.protocols.tables import DocumentQueue

log = logging.getLogger("graphgate.ingest")


class Leases:
    def __init__(self, queue: DocumentQueue, seconds: float) -> None:
        self.queue = queue
        self.seconds = seconds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.held: set[str] = set()

    async def claim(self, document_id: str) -> bool:
        if await self.queue.claim(document_id, self.owner, self.seconds):
            self.held.add(document_id)
            return True
        return False

    async def run(self, working: Callable[[], Collection[str]], free_workers: Callable[[], int],
                  enqueue: Callable[[str], None], lost: Callable[[str], None]) -> None:
        """Every third of a lease: renew the claims on what this replica is ``working`` on (``lost``
        for those another replica took meanwhile), then claim as many waiting documents as it has
        ``free_workers`` and ``enqueue`` them. Until cancelled; a failure is logged and tried again."""
        while True:
            try:
                await self._beat(working, free_workers, enqueue, lost)
            except GraphGateError as exc:   # the server unreachable: the next beat tries again
                log.warning("could not renew or claim documents (%s)", exc.message)
            await anyio.sleep(self.seconds / 3)

    async def _beat(self, working: Callable[[], Collection[str]], free_workers: Callable[[], int],
                    enqueue: Callable[[str], None], lost: Callable[[str], None]) -> None:
        busy = set(working())
        self.held &= busy
        if self.held:
            kept = set(await self.queue.renew(self.owner, sorted(self.held), self.seconds))
            for document_id in self.held - kept:
                log.warning("document %s is no longer this replica's (its lease ran out and another replica "
                            "took it, or it ended meanwhile); leaving it", document_id)
                lost(document_id)
            self.held = kept
        for document_id in await self.queue.claim_next(self.owner, self.seconds, free_workers()):
            self.held.add(document_id)
            enqueue(document_id)
