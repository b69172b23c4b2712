"""Driving the /rag API of an in-process gateway: upload a text, wait until it is processed, read
the stats, and reach the store behind the app to inspect or compare its tables."""

from __future__ import annotations

from typing import Any

import anyio
import httpx


async def upload(client: httpx.AsyncClient, name: str, text: str) -> dict[str, Any]:
    response = await client.post("/rag/documents", json={"name": name, "text": text})
    assert response.status_code in (200, 202), response.text
    return response.json()["documents"][0]


async def settle(client: httpx.AsyncClient, document_id: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            document = (await client.get(f"/rag/documents/{document_id}")).json()
            if document["status"] in ("processed", "failed"):
                return document
            await anyio.sleep(0.02)


async def graph(client: httpx.AsyncClient) -> dict[str, Any]:
    return (await client.get("/rag/stats")).json()


def store_of(client: httpx.AsyncClient):
    return client._transport.app.state.gateway.knowledge.store  # type: ignore[attr-defined]


async def store_snapshot_of(kb) -> list:
    """Every table's rows (but the store's meta row), to show that a refused request changed nothing."""
    tables = await kb.store.tables.db.read(lambda c: [r[0] for r in c.execute(   # either backend's tables
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()])
    return [(t, await kb.store.tables.db.read(
                lambda c, t=t: sorted(map(repr, c.execute(f'SELECT * FROM "{t}"').fetchall()))))
            for t in tables if t not in ("meta",)]


async def query(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """``POST /rag/query`` with ``body``; its JSON answer (the request must succeed)."""
    response = await client.post("/rag/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()


# LightRAG's classic retrieval: retrieval v2's knobs (entity linking, expansion, question-ranked
# relations, the evidence layout; on by default) off, for tests that check the classic channels or
# what one knob changes from them
CLASSIC: dict[str, str] = {"linking": "off", "expansion": "off", "relation_ranking": "degree",
                           "context_layout": "sections"}
