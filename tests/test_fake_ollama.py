"""Self-test of the fake Ollama server against the wire contract (ollama-api.md §1)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time

import anyio
import httpx
import ollama
import pytest

try:
    from tests.fake_ollama import FakeOllama, fake_embedding
except ImportError:  # tests/ is not a package: it is on sys.path itself (never so for mypy)
    from fake_ollama import FakeOllama, fake_embedding  # type: ignore[import-not-found, no-redef]

RFC3339_FRACTION = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$")
JSON_CT = "application/json; charset=utf-8"
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
           "eval_count", "eval_duration")
USER = [{"role": "user", "content": "hi there"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> FakeOllama:
    return FakeOllama()


@pytest.fixture
async def client(fake: FakeOllama):
    async with httpx.AsyncClient(transport=fake.transport(), base_url="http://ollama") as c:
        yield c


def ndjson(text: str) -> list[dict]:
    assert text.endswith("\n") and "\n\n" not in text
    return [json.loads(line) for line in text.splitlines()]


def assert_final(chunk: dict, reason: str = "stop") -> None:
    assert chunk["done"] is True and chunk["done_reason"] == reason
    assert all(type(chunk[k]) is int and chunk[k] > 0 for k in METRICS)


@pytest.mark.anyio
async def test_discovery_endpoints(client: httpx.AsyncClient) -> None:
    for method in ("GET", "HEAD"):
        root = await client.request(method, "/")
        assert root.status_code == 200 and root.headers["content-type"] == "text/plain; charset=utf-8"
        version = await client.request(method, "/api/version")
        assert version.status_code == 200 and version.headers["content-type"] == JSON_CT
    assert root.text == "" and (await client.get("/")).text == "Ollama is running"
    assert (await client.get("/api/version")).json() == {"version": "0.12.3"}

    tags = (await client.get("/api/tags")).json()["models"]
    assert {m["name"] for m in tags} == {"llama3.2:latest", "qwen3:latest", "nomic-embed-text:latest"}
    for m in tags:
        assert m["model"] == m["name"] and type(m["size"]) is int
        assert RFC3339_FRACTION.match(m["modified_at"]) and re.fullmatch(r"[0-9a-f]{64}", m["digest"])
        d = m["details"]
        assert d["parent_model"] == "" and d["format"] == "gguf" and d["families"] == [d["family"]]
        assert isinstance(d["parameter_size"], str) and isinstance(d["quantization_level"], str)

    (ps,) = (await client.get("/api/ps")).json()["models"]
    assert ps["name"] == "llama3.2:latest" and RFC3339_FRACTION.match(ps["expires_at"])
    assert type(ps["size_vram"]) is int and type(ps["context_length"]) is int


@pytest.mark.anyio
async def test_show(client: httpx.AsyncClient) -> None:
    by_model = (await client.post("/api/show", json={"model": "llama3.2"})).json()
    by_name = (await client.post("/api/show", json={"name": "llama3.2:latest"})).json()
    assert by_model == by_name
    assert by_model["capabilities"] == ["completion", "tools"]
    assert by_model["model_info"]["llama.context_length"] == 131072
    assert "num_ctx 8192" in by_model["parameters"] and isinstance(by_model["template"], str)
    qwen = (await client.post("/api/show", json={"model": "qwen3"})).json()
    assert "num_ctx" not in qwen["parameters"] and "thinking" in qwen["capabilities"]

    missing = await client.post("/api/show", json={})
    assert (missing.status_code, missing.json()) == (400, {"error": "model is required"})
    unknown = await client.post("/api/show", json={"model": "nope"})
    assert unknown.status_code == 404 and unknown.headers["content-type"] == JSON_CT
    assert unknown.json() == {"error": "model 'nope' not found"}


@pytest.mark.anyio
async def test_chat_stream_and_non_stream(client: httpx.AsyncClient) -> None:
    streamed = await client.post("/api/chat", json={"model": "llama3.2", "messages": USER})  # stream absent
    assert streamed.headers["content-type"] == "application/x-ndjson"
    assert "content-length" not in streamed.headers
    chunks = ndjson(streamed.text)
    for c in chunks:
        assert c["model"] == "llama3.2" and RFC3339_FRACTION.match(c["created_at"])
        assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str)
    assert [c["done"] for c in chunks] == [False] * 5 + [True]
    assert "".join(c["message"]["content"] for c in chunks) == "Hello from the fake model."
    assert_final(chunks[-1])
    assert chunks[-1]["message"] == {"role": "assistant", "content": ""}

    whole = await client.post("/api/chat", json={"model": "llama3.2", "messages": USER, "stream": False})
    assert whole.headers["content-type"] == JSON_CT
    body = whole.json()
    assert body["message"] == {"role": "assistant", "content": "Hello from the fake model."}
    assert_final(body)


@pytest.mark.anyio
async def test_chat_thinking_tools_and_structured(fake: FakeOllama, client: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    req = {"model": "qwen3", "messages": USER, "think": True, "tools": tools}
    chunks = ndjson((await client.post("/api/chat", json=req)).text)
    assert [c["message"].get("thinking") for c in chunks[:2]] == ["Let me think", " about this."]
    assert all(c["message"]["content"] == "" for c in chunks[:2])
    (call,) = chunks[-2]["message"]["tool_calls"]
    assert re.fullmatch(r"call_[0-9a-f]{8}", call["id"])
    assert call["function"] == {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}
    whole = (await client.post("/api/chat", json={**req, "stream": False})).json()["message"]
    assert whole["thinking"] == "Let me think about this." and whole["content"] == "Hello from the fake model."
    assert whole["tool_calls"][0]["function"]["name"] == "get_weather"
    # after a tool result the model answers in text
    answered = [*USER, {"role": "tool", "content": "sunny", "tool_call_id": call["id"]}]
    assert "tool_calls" not in (await client.post("/api/chat", json={**req, "messages": answered,
                                                                      "stream": False})).json()["message"]

    schema = {"type": "object", "properties": {"entities": {"type": "array"}, "name": {"type": "string"}}}
    structured = {"model": "llama3.2", "messages": USER, "format": schema}
    chunks = ndjson((await client.post("/api/chat", json=structured)).text)
    assert [c["message"]["content"] for c in chunks] == ['{"entities": []}', ""]
    assert (await client.post("/api/chat", json={**structured, "format": "json", "stream": False})
            ).json()["message"]["content"] == "{}"
    fake.structured = lambda request: json.dumps({"echo": request["messages"][0]["content"]})
    assert json.loads((await client.post("/api/chat", json={**structured, "stream": False})
                       ).json()["message"]["content"]) == {"echo": "hi there"}


@pytest.mark.anyio
async def test_chat_load_unload_and_request_errors(client: httpx.AsyncClient) -> None:
    for keep_alive, reason in ((None, "load"), (0, "unload"), ("0", "unload")):
        r = await client.post("/api/chat", json={"model": "llama3.2", "messages": [], "keep_alive": keep_alive})
        assert r.headers["content-type"] == JSON_CT  # one object even though stream defaults to true
        assert r.json() == {"model": "llama3.2", "created_at": r.json()["created_at"],
                            "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": reason}

    cases = [
        (b"", 400, "missing request body"),
        (b'{"model": "llama3.2"', 400, None),
        (b'{"messages": []}', 400, "model is required"),
        (b'{"model": "nope", "messages": []}', 404, "model 'nope' not found"),
        (b'{"model": "llama3.2", "messages": [], "think": true}', 400, '"llama3.2" does not support thinking'),
        (b'{"model": "fail-500", "messages": []}', 500, "llama runner process has terminated: exit status 2"),
        (b'{"model": "busy-503:latest", "messages": []}', 503,
         "server busy, please try again.  maximum pending requests exceeded"),
    ]
    for body, status, message in cases:
        r = await client.post("/api/chat", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status and r.headers["content-type"] == JSON_CT, body
        error = r.json()["error"]
        assert isinstance(error, str) and (message is None or error == message), body


@pytest.mark.anyio
async def test_generate(client: httpx.AsyncClient) -> None:
    chunks = ndjson((await client.post("/api/generate", json={"model": "llama3.2", "prompt": "why"})).text)
    assert "".join(c["response"] for c in chunks) == "Hello from the fake model."
    assert "message" not in chunks[0] and chunks[-1]["response"] == ""
    assert_final(chunks[-1])
    assert chunks[-1]["context"] and all(type(t) is int for t in chunks[-1]["context"])
    whole = await client.post("/api/generate", json={"model": "qwen3", "prompt": "why", "think": "high",
                                                     "stream": False})
    assert whole.headers["content-type"] == JSON_CT
    assert whole.json()["response"] == "Hello from the fake model." and whole.json()["thinking"]
    for keep_alive, reason in ((None, "load"), (0, "unload")):
        r = (await client.post("/api/generate", json={"model": "llama3.2", "prompt": "", "keep_alive": keep_alive}))
        assert {k: v for k, v in r.json().items() if k != "created_at"} == {
            "model": "llama3.2", "response": "", "done": True, "done_reason": reason}


@pytest.mark.anyio
async def test_embeddings(fake: FakeOllama, client: httpx.AsyncClient) -> None:
    texts = ["the graph gateway", "a graph gateway for ollama", "bananas are yellow"]
    r = await client.post("/api/embed", json={"model": "nomic-embed-text", "input": texts})
    body = r.json()
    assert r.headers["content-type"] == JSON_CT and body["model"] == "nomic-embed-text"
    assert all(type(body[k]) is int for k in ("total_duration", "load_duration", "prompt_eval_count"))
    a, b, c = body["embeddings"]
    assert len(a) == 64 and all(abs(math.hypot(*v) - 1) < 1e-9 for v in (a, b, c))
    cosine = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert cosine(a, b) > cosine(a, c)
    assert a == fake_embedding("the graph gateway", 64) and math.hypot(*fake_embedding("", 8)) == pytest.approx(1)

    fake.embed_dims["llama3.2:latest"] = 16
    one = (await client.post("/api/embed", json={"model": "llama3.2", "input": "x"})).json()["embeddings"]
    assert len(one) == 1 and len(one[0]) == 16
    bad = await client.post("/api/embed", json={"model": "nomic-embed-text", "input": 3})
    assert (bad.status_code, bad.json()) == (400, {"error": "invalid input type"})
    legacy = await client.post("/api/embeddings", json={"model": "nomic-embed-text", "prompt": "hello"})
    assert len(legacy.json()["embedding"]) == 64
    assert (await client.post("/api/embeddings", json={"model": "nomic-embed-text", "prompt": ""})
            ).json() == {"embedding": []}


@pytest.mark.anyio
async def test_model_management(fake: FakeOllama, client: httpx.AsyncClient) -> None:
    lines = ndjson((await client.post("/api/pull", json={"model": "mistral"})).text)
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    assert any(type(x.get("total")) is int and type(x.get("completed")) is int for x in lines)
    assert "mistral:latest" in fake.models
    assert (await client.post("/api/push", json={"model": "mistral", "stream": False})).json() == {"status": "success"}

    created = ndjson((await client.post("/api/create", json={"model": "mine", "from": "llama3.2",
                                                             "system": "Be brief."})).text)
    assert created[-1] == {"status": "success"} and fake.models["mine:latest"]["system"] == "Be brief."
    assert (await client.post("/api/create", json={})).json() == {"error": "model is required"}

    copied = await client.post("/api/copy", json={"source": "mine", "destination": "theirs"})
    assert (copied.status_code, copied.content) == (200, b"") and "theirs:latest" in fake.models
    missing = await client.post("/api/copy", json={"source": "ghost", "destination": "x"})
    assert (missing.status_code, missing.json()) == (404, {"error": 'model "ghost" not found'})
    deleted = await client.request("DELETE", "/api/delete", json={"model": "theirs"})
    assert (deleted.status_code, deleted.content) == (200, b"") and "theirs:latest" not in fake.models
    gone = await client.request("DELETE", "/api/delete", json={"model": "theirs"})
    assert (gone.status_code, gone.json()) == (404, {"error": "model 'theirs' not found"})

    data = b"gguf bytes"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 404
    assert (await client.post(f"/api/blobs/{digest}", content=b"other")).json() == {"error": "digest mismatch"}
    stored = await client.post(f"/api/blobs/{digest}", content=data)
    assert (stored.status_code, stored.content) == (201, b"")
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 200


@pytest.mark.anyio
async def test_openai_endpoints(client: httpx.AsyncClient) -> None:
    req = {"model": "llama3.2", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    r = await client.post("/v1/chat/completions", json=req)
    assert r.headers["content-type"] == "text/event-stream"
    events = r.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])
    chunks = [json.loads(e[6:]) for e in events[:-2]]
    assert all(c["object"] == "chat.completion.chunk" and c["system_fingerprint"] == "fp_ollama" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}
    assert "role" not in chunks[1]["choices"][0]["delta"]
    assert chunks[-2]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0

    whole = (await client.post("/v1/chat/completions", json={**req, "stream": False})).json()
    assert whole["object"] == "chat.completion" and whole["usage"]["completion_tokens"] == 5
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "Hello from the fake model."}
    text = (await client.post("/v1/completions", json={"model": "llama3.2", "prompt": "hi"})).json()
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "Hello from the fake model."

    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list" and all(type(m["created"]) is int for m in models["data"])
    assert (await client.get("/v1/models/qwen3:latest")).json()["id"] == "qwen3:latest"
    for r in (await client.get("/v1/models/nope"),
              await client.post("/v1/chat/completions", json={"model": "nope", "messages": USER})):
        assert r.status_code == 404 and r.headers["content-type"] == JSON_CT
        assert r.json() == {"error": {"message": "model 'nope' not found", "type": "not_found_error",
                                      "param": None, "code": None}}
    emb = (await client.post("/v1/embeddings", json={"model": "nomic-embed-text", "input": ["a", "b"]})).json()
    assert emb["object"] == "list" and [d["index"] for d in emb["data"]] == [0, 1]
    assert emb["data"][0]["object"] == "embedding" and len(emb["data"][0]["embedding"]) == 64


@pytest.mark.anyio
async def test_recording_routing_and_injected_failures(fake: FakeOllama, client: httpx.AsyncClient) -> None:
    await client.post("/api/chat", json={"model": "llama3.2", "messages": USER}, headers={"X-Task": "title"})
    (rec,) = fake.requests_to("/api/chat")
    assert rec.method == "POST" and rec.headers["x-task"] == "title"
    assert rec.json == {"model": "llama3.2", "messages": USER} and json.loads(rec.body) == rec.json

    forbidden = await client.get("/api/tags", headers={"Origin": "http://evil.example"})
    assert (forbidden.status_code, forbidden.content) == (403, b"")
    assert ((await client.get("/api/nope")).status_code, (await client.get("/api/nope")).text) == (
        404, "404 page not found")
    assert (await client.post("/api/tags")).text == "405 method not allowed"

    fake.fail_paths["/api/tags"] = 502
    failed = await client.get("/api/tags")
    assert (failed.status_code, failed.headers["content-type"], failed.json()) == (
        502, JSON_CT, {"error": "injected failure"})

    fake.hang_paths.add("/api/version")
    with anyio.move_on_after(0.3) as scope:  # in-process, a hang is only ended by cancellation
        await client.get("/api/version")
    assert scope.cancelled_caught and fake.hangs[-1].ended is not None
    assert [r.path for r in fake.requests][-1] == "/api/version"


def test_real_server_framing_timing_and_ollama_python() -> None:
    fake = FakeOllama(chunk_delay=0.25)
    with fake.serve() as url, httpx.Client(base_url=url) as client:
        arrivals: list[tuple[int, bytes]] = []   # (lines the fake had written by then, what was read)
        with client.stream("POST", "/api/chat", json={"model": "llama3.2", "messages": USER}) as r:
            assert r.headers["content-type"] == "application/x-ndjson"
            assert r.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.headers
            for piece in r.iter_raw():
                arrivals.append((fake.stream_events[-1].sent, piece))
        # whole lines in every network read, incrementally: the first one read before the last was written
        assert all(p.endswith(b"\n") for _, p in arrivals) and sum(p.count(b"\n") for _, p in arrivals) == 6
        assert arrivals[0][0] < 6
        assert fake.stream_events[-1].completed and fake.stream_events[-1].ended is not None

        c = ollama.Client(host=url)  # the reference client validates every response with pydantic
        assert c.chat("llama3.2", messages=USER).message.content == "Hello from the fake model."
        assert [x.message.content for x in c.chat("qwen3", messages=USER, stream=True)][-1] == ""
        assert c.generate("llama3.2", "hi").response == "Hello from the fake model."
        assert {m.model for m in c.list().models} >= {"llama3.2:latest"}
        assert c.ps().models[0].expires_at is not None and c.show("llama3.2").modelinfo
        assert len(c.embed("nomic-embed-text", ["a", "b"]).embeddings) == 2
        assert len(c.embeddings("nomic-embed-text", "a").embedding) == 64
        with pytest.raises(ollama.ResponseError) as err:
            c.chat("nope", messages=USER)
        assert err.value.status_code == 404


def test_real_server_broken_streams() -> None:
    fake = FakeOllama()
    with fake.serve() as url, httpx.Client(base_url=url, timeout=5) as client:
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            with client.stream("POST", "/api/chat", json={"model": "disconnect", "messages": USER}) as r:
                assert r.status_code == 200
                lines.extend(r.iter_lines())
        assert len(lines) == 2 and fake.stream_events[-1].completed is False

        with pytest.raises(httpx.RemoteProtocolError):  # non-stream: the body is cut short
            client.post("/api/chat", json={"model": "disconnect", "messages": USER, "stream": False})

        r = client.post("/api/chat", json={"model": "midstream-error", "messages": USER})
        *content, last = ndjson(r.text)
        assert r.status_code == 200 and len(content) == 2 and not any(c["done"] for c in content)
        assert last == {"error": "an error was encountered while running the model: unexpected EOF"}
        assert fake.stream_events[-1].completed is False

        sse = client.post("/v1/chat/completions", json={"model": "midstream-error", "messages": USER,
                                                        "stream": True}).text
        assert sse.count("data: ") == 3 and '"type":"api_error"' in sse and "[DONE]" not in sse

        start = time.monotonic()
        with client.stream("POST", "/api/generate", json={"model": "slow-first", "prompt": "hi"}) as r:
            first = next(r.iter_lines())
            assert time.monotonic() - start >= 0.9 and json.loads(first)["response"] == "Hello"


def test_real_server_hang_and_client_disconnect() -> None:
    fake = FakeOllama(chunk_delay=0.2)
    with fake.serve() as url:
        with httpx.Client(base_url=url, timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
            client.post("/api/chat", json={"model": "hang", "messages": USER})
        fake.hang_paths.add("/api/tags")
        with httpx.Client(base_url=url, timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
            client.get("/api/tags")
        deadline = time.monotonic() + 20
        while any(h.ended is None for h in fake.hangs) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fake.hangs) == 2 and all(h.ended is not None for h in fake.hangs)  # ended when the client left

        with httpx.Client(base_url=url) as client:
            with client.stream("POST", "/api/chat", json={"model": "qwen3", "messages": USER}) as r:
                next(r.iter_lines())
            left = time.monotonic()  # the client closed the connection after one line
        event = fake.stream_events[-1]
        while event.ended is None and time.monotonic() < left + 20:
            time.sleep(0.02)
        assert event.model == "qwen3" and event.path == "/api/chat"
        assert event.completed is False and event.ended is not None   # left, not run to its end
