"""The store caches the texts retrieval reads per turn (descriptions, chunk texts): a cached text
is never one a later commit changed or deleted."""

from __future__ import annotations

import pytest

from proxy.core.settings import Settings
from proxy.store.read_cache import TextCache
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, store_of, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)

ASK = {"query": "Where is Acme Corp?", "mode": "mix", "keywords": "off"}


def test_the_cache_is_bounded_and_keeps_the_recently_used() -> None:
    cache: TextCache[str] = TextCache(2)
    cache.put_many({1: "a", 2: "b"})
    assert cache.get_many([1]) == ({1: "a"}, [])   # 1 is now the most recent
    cache.put_many({3: "c"})
    assert cache.get_many([1, 2, 3]) == ({1: "a", 3: "c"}, [2])
    cache.evict([1])
    assert cache.get_many([1]) == ({}, [1]) and len(cache) == 1


@on_both_backends
async def test_an_edited_description_is_read_fresh(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        for name, text in (("team.txt", TEAM), ("city.md", CITY)):
            await settle(client, (await upload(client, name, text))["id"])
        before = await query(client, **ASK)   # caches Acme Corp's description
        assert "Acme Corp" in before["context"]
        edited = await client.patch("/rag/entities/acme corp", json={"description": "Makes anvils in Berlin."})
        assert edited.status_code == 200
        after = await query(client, **ASK)
        acme = next(e for e in after["entities"] if e["name"] == "Acme Corp")
        assert acme["description"] == "Makes anvils in Berlin." and "Makes anvils in Berlin." in after["context"]


@on_both_backends
async def test_a_deleted_documents_chunks_are_not_served_from_the_cache(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        city = await upload(client, "city.md", CITY)
        await settle(client, city["id"])
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])
        before = await query(client, **ASK)
        store = store_of(client)
        keys = list(store.read_memory_sync(lambda rows, graph: dict(rows.chunk_keys)).values())
        assert any("headquarters in Berlin" in c["content"] for c in before["chunks"])   # cached now
        assert (await client.delete(f"/rag/documents/{city['id']}")).status_code == 200
        after = await query(client, **ASK)
        assert all("headquarters in Berlin" not in c["content"] for c in after["chunks"])
        texts = store.chunk_texts_sync(keys)   # every key the store had before the deletion
        assert texts and all("headquarters in Berlin" not in content for content, _ in texts.values())
