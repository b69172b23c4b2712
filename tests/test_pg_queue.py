"""The ingestion queue several replicas share (PostgreSQL): claims, leases and their expiry, and
``claim_next`` handing each waiting document to one replica only, on a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from proxy.store.postgres.connection import PgDatabase
from proxy.store.postgres.documents import PgDocuments
from proxy.store.postgres.queue import PgDocumentQueue

pytestmark = pytest.mark.anyio


@pytest.fixture
async def queue(pg_server: str, pg_schema: str) -> AsyncIterator[tuple[PgDocuments, PgDocumentQueue]]:
    db = PgDatabase(pg_server, pg_schema)
    documents = PgDocuments(db)
    for number in range(20):
        await documents.insert({"id": f"d{number:02d}", "name": f"d{number:02d}.txt", "mime": "text/plain",
                                "size": 1}, "text")
    yield documents, PgDocumentQueue(db)
    db.close()


async def test_a_claimed_document_is_no_other_replicas_until_its_lease_runs_out(
        queue: tuple[PgDocuments, PgDocumentQueue]) -> None:
    _, jobs = queue
    assert await jobs.claim("d00", "a", 30)
    assert await jobs.claim("d00", "a", 30)           # its own claim: renewed
    assert not await jobs.claim("d00", "b", 30)
    assert await jobs.renew("a", ["d00", "d01"], 0.2) == ["d00"]   # d01 is not a's; d00's lease now ends soon
    await anyio.sleep(0.4)                              # a stopped renewing (killed)
    assert await jobs.claim("d00", "b", 30)
    assert await jobs.renew("a", ["d00"], 30) == []     # a learns it lost it


async def test_claim_next_hands_each_waiting_document_to_one_replica(
        queue: tuple[PgDocuments, PgDocumentQueue]) -> None:
    _, jobs = queue
    taken: dict[str, list[str]] = {"a": [], "b": []}

    async def take(owner: str) -> None:
        while claimed := await jobs.claim_next(owner, 30, 3):
            taken[owner] += claimed

    async with anyio.create_task_group() as group:
        group.start_soon(take, "a")
        group.start_soon(take, "b")
    everything = taken["a"] + taken["b"]
    assert sorted(everything) == [f"d{n:02d}" for n in range(20)]   # each once, none twice
    assert await jobs.claim_next("c", 30, 5) == []


async def test_finished_failed_or_retried_documents_hold_no_lease(
        queue: tuple[PgDocuments, PgDocumentQueue]) -> None:
    documents, jobs = queue
    assert await jobs.claim("d03", "a", 30)
    await documents.set_status("d03", "failed", "boom")
    assert not await jobs.claim("d03", "b", 30)         # failed: nobody's work
    await documents.set_status("d03", "pending")        # retried: free at once, whoever asks
    assert await jobs.claim("d03", "b", 30)
    assert sorted(await jobs.claim_next("a", 30, 100)) == [f"d{n:02d}" for n in range(20) if n != 3]
