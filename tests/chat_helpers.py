"""Chat turns through an in-process gateway: the corpus ingested, a chat request body, the user
chats that reached the fake upstream, and the traces GraphGate wrote for them."""

from __future__ import annotations

from typing import Any

import httpx

from tests.background import background_written
from tests.corpus import CITY, TEAM
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload

MODEL = "llama3.2:latest"


async def ingest(client: httpx.AsyncClient) -> None:
    for name, text in (("team.txt", TEAM), ("city.md", CITY)):
        await settle(client, (await upload(client, name, text))["id"])


def chats(fake: FakeOllama) -> list[Any]:
    """Chat requests that reached the upstream for users (not GraphGate's own structured calls)."""
    return [r for r in fake.requests_to("/api/chat") + fake.requests_to("/v1/chat/completions")
            if r.json is not None and not isinstance(r.json.get("format"), dict)]


def body(content: str = "Who works at Acme Corp?", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": False, **extra}


async def traces(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    await background_written()  # traces are written in the background
    return (await client.get("/rag/traces")).json()["traces"]
