"""Batches merged while the previous batch is still committing (the merger's overlay) build the
same graph as documents merged one at a time, and every store agrees afterwards; on both backends."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from proxy.core.settings import Settings
from proxy.merging import batches as merger
from proxy.store.backends import drop_base_sync
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store
from tests.rag_helpers import settle, upload
from tests.store_backends import backend_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)


PARTNERS = ["Bob Jones", "Carol White", "Dan Brown", "Eve Black", "Frank Green", "Grace Hall"]


def documents() -> list[tuple[str, str]]:
    # every document names Alice and Acme: each batch touches the rows the batch before it writes
    return [(f"doc-{i}.txt", f"Alice Smith met {p} at Acme Corp in week {i}. {p} works at Acme Corp.")
            for i, p in enumerate(PARTNERS * 2)]


async def build(settings: Settings, batch: int, together: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(merger, "MERGE_BATCH", batch)
    fake = FakeOllama()
    fake.structured = KnownFacts({"Alice Smith": "Person", "Acme Corp": "Organization",
                                  **{p: "Person" for p in PARTNERS}})
    overlapped = 0
    async with gateway_client(settings, fake) as client:
        pipeline = client._transport.app.state.gateway.knowledge.pipeline  # type: ignore[attr-defined]
        original = pipeline.integrator.changes

        async def changes(added, removed, overlay=None, texts=None):
            nonlocal overlapped
            overlapped += overlay is not None
            return await original(added, removed, overlay, texts)

        pipeline.integrator.changes = changes
        ids: list[str] = []
        if together:
            async def send(name: str, text: str) -> None:
                ids.append((await upload(client, name, text))["id"])
            async with anyio.create_task_group() as group:
                for name, text in documents():
                    group.start_soon(send, name, text)
        else:
            for name, text in documents():
                ids.append((await upload(client, name, text))["id"])
                await settle(client, ids[-1])
        for document_id in ids:
            assert (await settle(client, document_id))["status"] == "processed"
        store = pipeline.store
        rows = store.tables.db.read_sync(lambda c: {   # SQL both backends take: sources sorted below
            "entities": sorted(c.execute("SELECT name_key, name, type, description, source_ids "
                                         "FROM entities").fetchall()),
            "relations": sorted(c.execute("SELECT pair_key, keywords, description, weight, source_ids "
                                          "FROM relations").fetchall())})
        # descriptions are joined in merge order: compare their fragments, not their order
        rows["entities"] = [(*r[:3], sorted(r[3].split("\n")), sorted(r[4])) for r in rows["entities"]]
        rows["relations"] = [(r[0], r[1], sorted(r[2].split("\n")), r[3], sorted(r[4])) for r in rows["relations"]]
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))
    # each build starts from an empty base, as its fresh data directory is (PostgreSQL: the schema)
    await anyio.to_thread.run_sync(drop_base_sync, settings.store, "default")
    return {"rows": rows, "overlapped": overlapped}


async def test_overlapping_batches_build_the_graph_one_at_a_time_builds(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no summaries: a summary depends on the order its fragments arrive in, which differs here
    settings = settings.replace(summary_fragments=1000, summary_tokens=100_000)
    alone = await build(settings.replace(data_dir=tmp_path / "alone"), 48, together=False, monkeypatch=monkeypatch)
    assert alone["overlapped"] == 0
    # batches of two, arriving together: later batches are prepared while earlier ones commit
    overlapped = await build(settings.replace(data_dir=tmp_path / "overlap", llm_concurrency=8), 2, together=True,
                             monkeypatch=monkeypatch)
    # on a shared store too: the replica holds the base's merge turn from batch to batch
    # (proxy/merging/batches.py), so its batches overlap as on its own store
    assert overlapped["overlapped"] > 0
    assert overlapped["rows"] == alone["rows"]
    alice = next(r for r in alone["rows"]["entities"] if r[0] == "alice smith")
    assert len(alice[4]) == 12  # one source chunk per document
