"""What comes in and what comes back at GraphGate's edges (issue 16, items 7 and 9 and two small ones):

- a lone UTF-16 surrogate in a JSON string ("\\ud800", valid JSON, not valid Unicode) is refused with
  a 400 on every JSON route, relayed ones included, before anything is stored or forwarded;
- an upstream answering GraphGate's own calls with valid JSON of the wrong shape ([1, 2, 3],
  {"message": 5}, {"embeddings": "x"}...) gives a 502 naming the path and the shape, a document that
  fails readably, a chat that goes through unaugmented; a client's own request is still relayed as sent;
- a merged-away entity name resolves to its target on GET /rag/entities/{name};
- a multipart file name too long for a part's header line gets a 400 naming the limit.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from proxy.core.settings import Settings
from tests.background import background_written_sync
from tests.chat_helpers import MODEL, body, chats, ingest, traces
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.rag_helpers import settle, upload

pytestmark = pytest.mark.anyio

SURROGATE = "lone UTF-16 surrogate"

# (method, path, raw body): a lone surrogate in each place the review found a 500 or a reset
LONE_SURROGATES = [
    ("POST", "/rag/documents", b'{"name": "a.txt", "text": "Orion \\ud800 is a project."}'),
    ("POST", "/rag/documents", b'{"name": "\\udfff.txt", "text": "Orion is a project."}'),
    ("POST", "/rag/query", b'{"query": "Who runs Orion? \\ud800"}'),
    ("POST", "/rag/query", b'{"query": "Who runs Orion?", "history": [{"role": "user", "content": "\\udc00"}]}'),
    ("POST", "/rag/query", b'{"query": "Who runs Orion?", "answer": true, "model": "llama3.2\\ud800"}'),
    ("PATCH", "/rag/entities/Orion", b'{"description": "a project \\ud800"}'),
    ("PATCH", "/rag/relations", b'{"source": "Orion", "target": "Acme Corp", "description": "\\ud800"}'),
    ("DELETE", "/rag/relations", b'{"source": "Orion\\ud800", "target": "Acme Corp"}'),
    ("POST", "/rag/merge", b'{"entities": ["Orion", "Berlin\\ud800"], "target": "Orion"}'),
    ("POST", "/rag/merge", b'{"entities": ["Orion", "Berlin\\ud800"], "target": "Orion", "dry_run": true}'),
    ("POST", "/api/chat", b'{"model": "fake\\ud800", "messages": [{"role": "user", "content": "hi"}]}'),
    ("POST", "/api/chat", b'{"model": "llama3.2", "messages": [{"role": "user", "content": "Who runs Orion? \\ud800"}]'
                          b'}'),
    ("POST", "/api/chat", b'{"model": "llama3.2", "stream": false, "messages": [{"role": "user", "content": "\\udbff"}]'
                          b'}'),
    ("POST", "/api/chat", b'{"model": "llama3.2", "messages": [{"\\ud800": 1, "role": "user", "content": "hi"}]}'),
    ("POST", "/v1/chat/completions", b'{"model": "llama3.2", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("POST", "/api/generate", b'{"model": "llama3.2", "prompt": "Who runs Orion? \\ud800"}'),
    ("POST", "/api/embed", b'{"model": "nomic-embed-text", "input": ["\\ud800"]}'),
    # encoded raw (not UTF-8, yet Python's json decodes bytes with "surrogatepass")
    ("POST", "/api/chat", b'{"model": "llama3.2", "messages": [{"role": "user", "content": "Orion \xed\xa0\x80"}]}'),
    ("POST", "/rag/query", b'{"query": "Who runs Orion? \xed\xbf\xbf"}'),
]


def _state(client: httpx.Client, fake: FakeOllama) -> dict[str, Any]:
    stats = client.get("/rag/stats").json()
    stats.pop("bytes_on_disk", None)
    return {"stats": stats, "documents": client.get("/rag/documents").json()["total"],
            "orion": client.get("/rag/entities/Orion").json(),
            "relation": client.get("/rag/entities/Acme Corp").json(),
            "traces": len(client.get("/rag/traces").json()["traces"]),
            "upstream": [(r.method, r.path) for r in fake.requests if r.path not in ("/api/version", "/api/tags")]}


def _processed(client: httpx.Client) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        documents = client.get("/rag/documents").json()["documents"]
        if documents and all(d["status"] in ("processed", "failed") for d in documents):
            return
        time.sleep(0.02)
    raise AssertionError("documents not processed in 20 s")


def test_a_lone_surrogate_is_a_400_everywhere_and_changes_nothing(live_gateway: str, fake: FakeOllama,
                                                                   facts: KnownFacts) -> None:
    """Over real sockets: the review saw one of these reset the connection with no status at all."""
    with httpx.Client(base_url=live_gateway, timeout=20) as client:
        for name, text in (("team.txt", TEAM), ("city.md", CITY)):
            assert client.post("/rag/documents", json={"name": name, "text": text}).status_code == 202
        _processed(client)
        background_written_sync()  # traces of the setup are written in the background
        for method, path, raw in LONE_SURROGATES:
            before = _state(client, fake)
            response = client.request(method, path, content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 400, (method, path, raw, response.status_code, response.text[:300])
            error = response.json()["error"]
            message = error["message"] if isinstance(error, dict) else error  # the OpenAI surface's error object
            assert SURROGATE in message and "\\u" in message, (path, message)
            time.sleep(0.05)
            assert _state(client, fake) == before, (method, path, raw)
        # a paired surrogate (an emoji written as two escapes) is valid Unicode and goes through
        ok = client.post("/api/chat", content=b'{"model": "llama3.2", "stream": false, "messages": '
                                               b'[{"role": "user", "content": "Orion \\ud83d\\ude00"}]}')
        assert ok.status_code == 200 and ok.json()["done"] is True
        sent = [r for r in fake.requests_to("/api/chat") if r.json and "Orion" in json.dumps(r.json["messages"])]
        assert "\U0001F600" in json.dumps(sent[-1].json["messages"], ensure_ascii=False)


# ------------------------------------------------------------------ wrong-shape upstream JSON

WRONG = "with JSON of the wrong shape"
CHAT_SHAPES = [[1, 2, 3], {"message": 5}, {"message": {"content": 5}}, {"message": None}, "a string", 7]


@pytest.fixture
async def gw(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        yield client


@pytest.mark.parametrize("shape", CHAT_SHAPES, ids=json.dumps)
async def test_a_wrong_shape_answer_to_rag_query_is_a_readable_502(gw: httpx.AsyncClient, fake: FakeOllama,
                                                                   shape: Any) -> None:
    fake.wrong_shapes["shaped"] = shape
    response = await gw.post("/rag/query", json={"query": "Who runs Orion?", "answer": True, "model": "shaped"})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert WRONG in error and "/api/chat" in error, error
    good = await gw.post("/rag/query", json={"query": "Who runs Orion?", "answer": True, "model": MODEL})
    assert good.status_code == 200 and good.json()["answer"] == "".join(fake.reply)


@pytest.mark.parametrize("role, shape", [
    ("llm_model", [1, 2, 3]), ("llm_model", {"message": 5}), ("llm_model", {"message": {"content": ["x"]}}),
    ("embed_model", [1, 2, 3]), ("embed_model", {"embeddings": "x"}), ("embed_model", {"embeddings": 5}),
    ("embed_model", {"embeddings": [1.0, 2.0]}), ("embed_model", {"embeddings": None}),
], ids=str)
async def test_wrong_shape_extraction_or_embeddings_fail_the_document_readably(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, role: str, shape: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    fake.wrong_shapes["shaped"] = shape
    async with gateway_client(settings.replace(**{role: "shaped"}, llm_retries=3), fake) as client:
        document = await upload(client, "team.txt", TEAM)
        done = await settle(client, document["id"])
        assert done["status"] == "failed"
        assert WRONG in done["error"] and "internal error" not in done["error"], done["error"]
        path = "/api/chat" if role == "llm_model" else "/api/embed"
        assert path in done["error"]
        # not Ollama as GraphGate knows it: no call is retried with backoff (llm_retries=3)
        assert not [r for r in caplog.records if "try 2 of 3" in r.getMessage()]
        stats = (await client.get("/rag/stats")).json()
        assert (stats["entities"], stats["relations"]) == (0, 0)
        assert (await client.post("/api/chat", json=body("/bypass hi"))).status_code == 200


@pytest.mark.parametrize("path, shape", [("/api/tags", [1, 2, 3]), ("/api/tags", {"models": 5}),
                                         ("/api/show", [1]), ("/api/show", {"capabilities": 5})], ids=str)
async def test_wrong_shape_discovery_fails_the_document_readably(settings: Settings, fake: FakeOllama,
                                                                 facts: KnownFacts, path: str, shape: Any) -> None:
    """No GRAPHGATE_LLM_MODEL: the extraction model is discovered through /api/tags and /api/show."""
    fake.wrong_shapes[path] = shape
    async with gateway_client(settings.replace(llm_model=None), fake) as client:
        document = await upload(client, "team.txt", TEAM)
        done = await settle(client, document["id"])
        assert done["status"] == "failed"
        assert "internal error" not in done["error"], done["error"]
        assert WRONG in done["error"] or "has no chat model" in done["error"], done["error"]
        del fake.wrong_shapes[path]
        assert (await client.post(f"/rag/documents/{document['id']}/retry")).status_code == 202
        assert (await settle(client, document["id"]))["status"] == "processed"


@pytest.mark.parametrize("shape", [[1, 2, 3], {"message": 5}], ids=json.dumps)
async def test_wrong_shape_keywords_leave_the_chat_unaugmented(settings: Settings, fake: FakeOllama,
                                                               facts: KnownFacts, shape: Any) -> None:
    fake.wrong_shapes["shaped"] = shape
    async with gateway_client(settings.replace(keyword_model="shaped"), fake) as client:
        await ingest(client)
        response = await client.post("/api/chat", json=body())
        assert response.status_code == 200 and response.json()["message"]["content"] == "".join(fake.reply)
        assert chats(fake)[-1].json["messages"] == body()["messages"]  # forwarded as the client sent it
        [trace] = await traces(client)
        assert not trace["augmented"] and trace["reason"].startswith("retrieval failed") and WRONG in trace["reason"]


@pytest.mark.parametrize("shape", [[1], {"capabilities": 5, "model_info": [1], "parameters": 7},
                                   {"capabilities": ["completion"], "model_info": {"x.context_length": "big"}}],
                         ids=json.dumps)
async def test_a_wrong_shape_show_leaves_the_chat_working(gw: httpx.AsyncClient, fake: FakeOllama,
                                                          shape: Any) -> None:
    """The chat model's /api/show (for its capabilities and window) answered oddly: the chat still
    gets its answer, augmented or not, never a 500."""
    fake.wrong_shapes["/api/show"] = shape
    response = await gw.post("/api/chat", json=body())
    assert response.status_code == 200 and response.json()["message"]["content"] == "".join(fake.reply)
    [trace] = await traces(gw)
    assert "internal error" not in (trace["reason"] or "")


async def test_a_wrong_shape_reply_to_a_client_is_relayed_as_sent(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    """Only GraphGate's own calls are checked: what a client asked for comes back byte for byte."""
    fake.wrong_shapes["/api/embed"] = [1, 2, 3]
    fake.wrong_shapes["/api/tags"] = {"models": 5}
    embed = await gw.post("/api/embed", json={"model": "nomic-embed-text", "input": "x"})
    assert embed.status_code == 200 and embed.content == b"[1,2,3]\n"
    tags = await gw.get("/api/tags")
    assert tags.status_code == 200 and tags.content == b'{"models":5}\n'


@pytest.mark.parametrize("shape", [{"message": 5}, {"message": {"content": [1]}}, {"message": None, "done": True}],
                         ids=json.dumps)
async def test_a_wrong_shape_line_in_the_playground_answer_is_an_error_event(client: httpx.AsyncClient,
                                                                             fake: FakeOllama, shape: Any) -> None:
    """The console's streamed answer (GraphGate's own streamed /api/chat call) reads each line."""
    from tests.playground_helpers import run

    fake.wrong_shapes["shaped"] = shape
    fragment = (await run(client, htmx=True, query="Who?", mode="bypass", answer="1", model="shaped")).text
    url = must_find(r'data-answer-stream="(/admin/playground/answer/[^"]+)"', fragment).group(1)
    stream = await client.get(url)
    assert stream.status_code == 200
    last = stream.text.replace("\r\n", "\n").strip().split("\n\n")[-1]
    assert last.startswith("event: error\n") and WRONG in last, last
    assert "Traceback" not in stream.text and "internal error" not in stream.text


# ------------------------------------------------------------------ merged-away names, long file names


async def test_a_merged_away_name_resolves_to_its_target(gw: httpx.AsyncClient) -> None:
    merged = await gw.post("/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"})
    assert merged.status_code == 200, merged.text
    target = await gw.get("/rag/entities/Acme Corp")
    assert target.status_code == 200 and "resolved_from" not in target.json()
    for asked in ("Orion", "orion", " ORION "):
        response = await gw.get(f"/rag/entities/{asked}")
        assert response.status_code == 200, (asked, response.text)
        assert response.json() == {**target.json(), "resolved_from": asked}
    # merged again into another: the old alias follows to the new target
    assert (await gw.post("/rag/merge", json={"entities": ["Acme Corp"], "target": "Berlin"})).status_code == 200
    again = await gw.get("/rag/entities/Orion")
    assert again.status_code == 200 and again.json()["name"] == "Berlin"
    assert (await gw.get("/rag/entities/Nobody")).status_code == 404


async def test_a_file_name_too_long_for_the_multipart_header_is_a_clear_400(client: httpx.AsyncClient) -> None:
    for name in ("a" * 10_000 + ".txt", "é" * 3_000 + ".txt"):
        response = await client.post("/rag/documents", files={"files": (name, b"Orion is a project.", "text/plain")})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert "file name is too long" in error and "4224 bytes" in error, error
    assert (await client.get("/rag/documents")).json()["total"] == 0
    long_but_fits = "b" * 1000 + ".txt"
    ok = await client.post("/rag/documents", files={"files": (long_but_fits, b"Orion is a project.", "text/plain")})
    assert ok.status_code == 202 and len(ok.json()["documents"][0]["name"]) <= 200


@pytest.mark.parametrize("path, shape", [("/api/version", [1, 2, 3]), ("/api/tags", {"models": 5}),
                                         ("/api/tags", "x")], ids=str)
async def test_health_names_a_wrong_shape_discovery_reply(client: httpx.AsyncClient, fake: FakeOllama, path: str,
                                                          shape: Any) -> None:
    fake.wrong_shapes[path] = shape
    response = await client.get("/rag/health")
    assert response.status_code in (200, 503)
    report = response.json()
    assert report["ready"] is False or report["problems"], report
    text = json.dumps(report)
    assert "internal error" not in text and ("wrong shape" in text or "could not be listed" in text), text
