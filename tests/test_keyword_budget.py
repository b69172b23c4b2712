"""A turn never waits on a slow keyword call (issue 18, item 1): the searches that need no keywords
(entity linking, the question's own vector) run while it is on its way; past the turn's keyword
budget the turn goes on with the question alone, and the call, finishing in the background, fills
the cache for the next turn that asks the same."""

from __future__ import annotations

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.chat_helpers import body, chats, ingest, traces
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query

pytestmark = pytest.mark.anyio


def slow_keywords(settings: Settings) -> Settings:
    return settings.replace(keyword_budget=0.05, linking="on")


async def test_a_turn_is_grounded_and_forwarded_while_its_keyword_call_is_still_out(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(slow_keywords(settings), fake) as client:
        await ingest(client)
        fake.hold_structured = anyio.Event()   # the keyword call cannot come back until the turn is answered
        with anyio.fail_after(10):
            response = await client.post("/api/chat", json=body("Who works at Acme Corp?"))
        assert response.status_code == 200
        system = chats(fake)[-1].json["messages"][0]
        assert system["role"] == "system" and "Acme Corp" in system["content"]   # linked without keywords
        [trace] = await traces(client)
        assert trace["augmented"] and trace["detail"]["keywords"]["source"] == "late"
        assert facts.calls.count("keywords") == 1   # the call was made, and is still out
        fake.hold_structured.set()
        with anyio.fail_after(10):   # it finishes in the background and is cached for the same question
            while True:
                again = await query(client, query="Who works at Acme Corp?", mode="mix")
                if again["keywords"]["source"] == "cache":
                    break
                await anyio.sleep(0.05)
        made = facts.calls.count("keywords")
        cached = await query(client, query="Who works at Acme Corp?", mode="mix")
        assert cached["keywords"]["source"] == "cache" and cached["keywords"]["low_level"]
        assert facts.calls.count("keywords") == made   # a cached answer makes no call


async def test_keywords_back_within_the_budget_are_used(settings: Settings, fake: FakeOllama,
                                                         facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(keyword_budget=30, linking="on"), fake) as client:
        await ingest(client)
        result = await query(client, query="Who works at Acme Corp?", mode="mix")
        assert result["keywords"]["source"] == "llm" and result["keywords"]["low_level"]
        assert "keyword search" in result["timings"]


async def test_a_late_keyword_call_that_fails_is_not_the_turns_failure(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(slow_keywords(settings).replace(keyword_model="garbled"), fake) as client:
        await ingest(client)
        fake.hold_structured = anyio.Event()
        with anyio.fail_after(10):
            response = await client.post("/api/chat", json=body("Who works at Acme Corp?"))
        fake.hold_structured.set()
        assert response.status_code == 200
        [trace] = await traces(client)
        assert trace["augmented"] and trace["detail"]["keywords"]["source"] == "late"
        health = await client.get("/rag/health")
        assert health.status_code in (200, 503) and "error" not in health.json()   # the app keeps serving


async def test_the_keyword_budget_is_a_per_query_knob_with_bounds(settings: Settings, fake: FakeOllama,
                                                                  facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        bad = await client.post("/rag/query", json={"query": "Acme Corp", "keyword_budget": -1})
        assert bad.status_code == 400 and "keyword_budget" in bad.json()["error"]
        ok: httpx.Response = await client.post("/rag/query", json={"query": "Acme Corp", "keyword_budget": 5})
        assert ok.status_code == 200 and ok.json()["keywords"]["source"] in ("llm", "cache")
