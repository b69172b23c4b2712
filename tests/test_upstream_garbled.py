"""An upstream that is down when GraphGate starts, or that answers with malformed NDJSON or JSON cut
short (the fake's ``garbled`` model).

What a client asked for is relayed exactly as the upstream sent it (GraphGate is a faithful proxy: an
Ollama client sees what it would have seen talking to Ollama directly), and the gateway stays healthy.
Where GraphGate itself reads the answer (keywords, extraction, embeddings, /rag/query's answer) the
garbage becomes a readable error: an unaugmented turn, a failed document that can be retried, a 502.
"""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.app import Settings, create_app
from tests.chat_helpers import MODEL, body, chats, ingest, traces
from tests.conftest import gateway_client
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import GARBLED_LINES, FakeOllama
from tests.live import serve_in_thread
from tests.rag_helpers import settle, upload
from tests.reliability_harness import wait_until
from tests.servers import free_port

pytestmark = pytest.mark.anyio


def garbled_chat(stream: bool) -> dict:
    return {"model": "garbled", "stream": stream, "messages": [{"role": "user", "content": "/bypass hello"}]}


async def healthy(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/chat", json={**body("/bypass hi")})
    assert response.status_code == 200 and response.json()["done"] is True


async def test_a_garbled_stream_is_relayed_as_sent_and_the_gateway_stays_healthy(
        client: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await client.post("/api/chat", json=garbled_chat(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = response.content.split(b"\n")
    assert [json.loads(line)["message"]["content"] for line in lines[:2]] == fake.reply[:2]
    assert response.content.endswith(b"".join(GARBLED_LINES))
    await healthy(client)


async def test_a_reply_cut_short_is_relayed_as_sent(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/chat", json=garbled_chat(stream=False))
    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)
    assert response.content.startswith(b'{"model":"garbled"')
    await healthy(client)


async def test_garbled_keywords_leave_the_turn_unaugmented(settings: Settings, fake: FakeOllama,
                                                           facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(keyword_model="garbled"), fake) as client:
        await ingest(client)
        response = await client.post("/api/chat", json=body())
        assert response.status_code == 200 and response.json()["message"]["content"] == "".join(fake.reply)
        assert chats(fake)[-1].json["messages"] == body()["messages"]  # forwarded as the client sent it
        [trace] = await traces(client)
        assert not trace["augmented"] and trace["reason"].startswith("retrieval failed")


@pytest.mark.parametrize("role", ["llm_model", "embed_model"])
async def test_garbled_extraction_or_embeddings_fail_the_document_readably(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, role: str) -> None:
    async with gateway_client(settings.replace(**{role: "garbled"}, llm_retries=2), fake) as client:
        document = await upload(client, "team.txt", TEAM)
        done = await settle(client, document["id"])
        assert done["status"] == "failed"
        assert "invalid JSON" in done["error"] or "not JSON" in done["error"], done["error"]
        stats = (await client.get("/rag/stats")).json()
        assert (stats["entities"], stats["relations"]) == (0, 0)
        assert stats["index_sizes"] == {"chunks": stats["chunks"], "entities": 0, "relations": 0}
        await healthy(client)


async def test_a_garbled_answer_to_rag_query_is_a_502(gw_query: httpx.AsyncClient) -> None:
    response = await gw_query.post("/rag/query", json={"query": "Who works at Acme Corp?", "answer": True,
                                                       "model": "garbled"})
    assert response.status_code == 502
    assert "invalid JSON" in response.json()["error"]
    assert (await gw_query.post("/rag/query", json={"query": "Who works at Acme Corp?", "answer": True,
                                                    "model": MODEL})).status_code == 200


@pytest.fixture
async def gw_query(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        yield client


def test_started_while_the_upstream_is_down_then_works_once_it_is_up(settings: Settings, fake: FakeOllama,
                                                                     facts: KnownFacts) -> None:
    port = free_port()
    app = create_app(settings.replace(upstream=f"http://127.0.0.1:{port}", llm_retries=1))
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/").text == "Ollama is running"
        for response in (client.get("/api/tags"), client.post("/api/chat", json=body())):
            assert response.status_code == 502 and "unreachable" in response.json()["error"]
        document = client.post("/rag/documents", json={"name": "team.txt", "text": TEAM})
        assert document.status_code == 202
        doc_id = document.json()["documents"][0]["id"]
        failed = wait_until(lambda: failed_document(client, doc_id), 30, "the document to fail")
        assert "unreachable" in failed["error"]
        with fake.serve(port=port):
            assert client.get("/api/tags").status_code == 200
            chat = client.post("/api/chat", json=body())
            assert chat.status_code == 200 and chat.json()["done"] is True
            assert client.post(f"/rag/documents/{doc_id}/retry").status_code == 202
            processed = wait_until(lambda: processed_document(client, doc_id), 30, "the retried document")
            assert processed["counts"]["entities"] > 0


def failed_document(client: httpx.Client, doc_id: str) -> dict | None:
    document = client.get(f"/rag/documents/{doc_id}").json()
    return document if document["status"] == "failed" else None


def processed_document(client: httpx.Client, doc_id: str) -> dict | None:
    document = client.get(f"/rag/documents/{doc_id}").json()
    assert document["status"] != "failed", document
    return document if document["status"] == "processed" else None
