"""A retrieval's blocking part (searches, ranking, context) runs in a worker thread, at most
GRAPHGATE_RETRIEVAL_THREADS at once; the others wait their turn and are grounded all the same."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.chat_helpers import ingest
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query

pytestmark = pytest.mark.anyio

QUESTIONS = ["Who works at Acme Corp?", "Where is Acme Corp?", "Who founded Acme Corp?", "What does Acme Corp make?"]


class Inside:
    """Counts the retrievals inside their blocking part; each stays until ``together`` are in
    (or ``wait`` seconds passed), so that any that may run side by side do."""

    def __init__(self, together: int, wait: float = 20.0) -> None:
        self.together, self.wait = together, wait
        self.now = self.most = 0
        self.lock = threading.Lock()
        self.enough = threading.Event()

    def wrap(self, client: httpx.AsyncClient) -> None:
        retriever = client._transport.app.state.gateway.knowledge.retriever  # type: ignore[attr-defined]
        blocking = retriever._blocking

        def counted(*args: Any) -> Any:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
                if self.now >= self.together:
                    self.enough.set()
            self.enough.wait(self.wait)
            try:
                return blocking(*args)
            finally:
                with self.lock:
                    self.now -= 1

        retriever._blocking = counted


async def asked_together(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    async def ask(text: str) -> None:
        results.append(await query(client, query=text, mode="mix", keywords="off"))

    async with anyio.create_task_group() as group:
        for text in QUESTIONS:
            group.start_soon(ask, text)
    return results


async def test_one_retrieval_thread_runs_the_blocking_parts_one_after_another(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(retrieval_threads=1, burst_retrievals=0), fake) as client:
        await ingest(client)
        inside = Inside(together=2, wait=0.4)   # a second never comes in: each waits 0.4 s
        inside.wrap(client)
        results = await asked_together(client)
    assert inside.most == 1
    assert len(results) == 4 and all("Acme Corp" in r["context"] for r in results)


async def test_more_retrieval_threads_run_side_by_side(settings: Settings, fake: FakeOllama,
                                                       facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(retrieval_threads=3, burst_retrievals=0), fake) as client:
        await ingest(client)
        inside = Inside(together=3)
        inside.wrap(client)
        results = await asked_together(client)
    assert inside.most == 3
    assert len(results) == 4 and all("Acme Corp" in r["context"] for r in results)
