"""/rag/stats reads the tables, the vector indexes and the graph at one generation: a commit
reaches the tables first, then the rows, graph and indexes; a stats read between the two (the
step held open here, in the store's own worker thread) waits for the commit rather than report
tables a commit ahead of the indexes (the flaky kill-loop check of issue 18's note)."""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from proxy.store.store import KnowledgeStore
from tests.corpus import TEAM
from tests.rag_helpers import settle, upload

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("facts")]


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)
HOLD = 0.6   # seconds a read is given, while a commit is held between its tables and the rest
HANG_GUARD = 30.0   # seconds the commit is held at most (only a test that never releases it waits this long)


async def test_stats_never_show_the_tables_ahead_of_the_indexes(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    held, release = threading.Event(), threading.Event()
    apply_memory = KnowledgeStore.apply_memory_sync

    def slow_apply(store, changes, deltas, generation):
        if changes.entities_upserted and not held.is_set():   # the commit that brings entities
            held.set()
            release.wait(HANG_GUARD)   # until the test has seen whether the read waits
        return apply_memory(store, changes, deltas, generation)

    monkeypatch.setattr(KnowledgeStore, "apply_memory_sync", slow_apply)
    document = await upload(client, "team.txt", TEAM)
    with anyio.fail_after(HANG_GUARD):
        while not held.is_set():
            await anyio.sleep(0.005)
    answers: list[dict] = []

    async def read() -> None:
        answers.append((await client.get("/rag/stats")).json())

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        await anyio.sleep(HOLD)   # long enough for a read that does not wait for the commit
        answered_while_held = bool(answers)
        release.set()
    stats = answers[0]
    assert stats["entities"] > 0
    assert stats["index_sizes"]["entities"] == stats["entities"]
    assert stats["index_sizes"]["relations"] == stats["relations"]
    assert stats["index_sizes"]["chunks"] == stats["chunks"]
    assert stats["graph"]["vertices"] == stats["entities"]
    assert not answered_while_held   # it waited for the held commit (it landed inside the hold)
    await settle(client, document["id"])
