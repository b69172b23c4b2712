"""ollama-api.md §6, the conformance checklist, in process (items needing real sockets are in
test_live_streaming.py; the official client is in test_ollama_client.py)."""

from __future__ import annotations

import hashlib
import json
import re

import httpx
import pytest

from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.anyio

RFC3339_FRACTION = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d)$")
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
           "eval_duration")
MODEL = "llama3.2:latest"


def ndjson(response: httpx.Response) -> list[dict]:
    text = response.text
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    assert all(line.strip() and not line.startswith("data:") for line in lines)
    return [json.loads(line) for line in lines]


def chat_body(**extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **extra}


# 1
async def test_01_root(client: httpx.AsyncClient) -> None:
    head = await client.head("/")
    assert head.status_code == 200
    got = await client.get("/")
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/plain; charset=utf-8"
    assert got.text == "Ollama is running"


# 2
async def test_02_version_is_the_upstreams(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    fake.version = "0.12.7"
    for method in ("GET", "HEAD"):
        response = await client.request(method, "/api/version")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
    version = (await client.get("/api/version")).json()["version"]
    assert version == "0.12.7"
    assert re.match(r"^v?\d+(\.\d+)*(-.*)?$", version)


# 3, 4
async def test_03_04_tags(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/tags")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    models = response.json()["models"]
    assert isinstance(models, list) and models
    for entry in models:
        assert isinstance(entry["name"], str) and isinstance(entry["model"], str)
        assert RFC3339_FRACTION.match(entry["modified_at"])
        assert isinstance(entry["size"], int) and isinstance(entry["digest"], str)
        for key in ("parent_model", "format", "family", "parameter_size", "quantization_level"):
            assert isinstance(entry["details"][key], str)
        assert all(isinstance(f, str) for f in entry["details"]["families"])
    assert (await client.head("/api/tags")).status_code == 200


# 5
async def test_05_tags_answer_from_cache_when_upstream_hangs(settings, fake: FakeOllama) -> None:
    from tests.conftest import gateway_client

    async with gateway_client(settings.replace(discovery_timeout=0.5), fake) as client:
        fresh = await client.get("/api/tags")
        fake.hang_paths.add("/api/tags")
        stale = await client.get("/api/tags")
        assert stale.status_code == 200
        assert stale.json() == fresh.json()
        assert stale.headers["x-graphgate-stale"] == "1"


async def test_05_tags_without_cache_give_504_quickly(settings, fake: FakeOllama) -> None:
    from tests.conftest import gateway_client

    fake.hang_paths.add("/api/tags")
    async with gateway_client(settings.replace(discovery_timeout=0.5), fake) as client:
        response = await client.get("/api/tags")
        assert response.status_code == 504
        assert "timed out" in response.json()["error"]


# 6
async def test_06_ps(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/ps")
    assert response.status_code == 200
    for entry in response.json()["models"]:
        assert isinstance(entry["size"], int) and isinstance(entry["size_vram"], int)
        assert RFC3339_FRACTION.match(entry["expires_at"])
        for key in ("name", "model", "digest", "details"):
            assert key in entry


# 7, 8
async def test_07_08_show(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    for body in ({"model": MODEL}, {"name": MODEL}):
        response = await client.post("/api/show", json=body)
        assert response.status_code == 200
        data = response.json()
        assert isinstance(data["model_info"], dict)
        assert isinstance(data["capabilities"], list)
        assert isinstance(data["template"], str) and isinstance(data["parameters"], str)
        assert "details" in data
    missing = await client.post("/api/show", json={"model": "no-such-model"})
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/json")
    assert missing.json() == {"error": "model 'no-such-model' not found"}


# 9, 10, 11
async def test_09_10_11_streamed_chat(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await client.post("/api/chat", json=chat_body())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = ndjson(response)
    assert len(lines) >= 2
    for line in lines:
        assert isinstance(line["model"], str) and isinstance(line["created_at"], str)
        assert line["message"]["role"] == "assistant" and isinstance(line["message"]["content"], str)
        assert isinstance(line["done"], bool)
    assert [line["done"] for line in lines].count(True) == 1 and lines[-1]["done"] is True
    final = lines[-1]
    assert isinstance(final["done_reason"], str)
    for metric in METRICS:
        assert type(final[metric]) is int


# 13
async def test_13_stream_headers(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/chat", json=chat_body(), headers={"accept-encoding": "gzip"})
    assert "content-length" not in response.headers
    assert "content-encoding" not in response.headers
    assert response.headers["x-accel-buffering"] == "no"


# 14
async def test_14_non_streamed_chat(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await client.post("/api/chat", json=chat_body(stream=False))
    assert response.headers["content-type"].startswith("application/json")
    data = response.json()
    assert data["message"]["content"] == "".join(fake.reply)
    assert data["done"] is True
    assert all(type(data[m]) is int for m in METRICS)


# 15
@pytest.mark.parametrize("stream", [True, False, None])
async def test_15_stream_flag_reaches_upstream_as_sent(client: httpx.AsyncClient, fake: FakeOllama,
                                                       stream: bool | None) -> None:
    body = chat_body() if stream is None else chat_body(stream=stream)
    response = await client.post("/api/chat", json=body)
    sent = fake.requests_to("/api/chat")[-1].json
    assert ("stream" in sent) == (stream is not None)
    assert sent.get("stream") == stream
    expected_type = "application/json" if stream is False else "application/x-ndjson"
    assert response.headers["content-type"].startswith(expected_type)


# 16
async def test_16_thinking_and_tool_calls_pass_through(client: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object", "properties": {}}}}]
    body = {"model": "qwen3:latest", "messages": [{"role": "user", "content": "hi"}], "think": True,
            "tools": tools}
    lines = ndjson(await client.post("/api/chat", json=body))
    assert any(line["message"].get("thinking") for line in lines)
    calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert calls and calls[0]["function"]["name"] == "get_weather"
    assert isinstance(calls[0]["function"]["arguments"], dict) and calls[0]["id"]
    whole = (await client.post("/api/chat", json={**body, "stream": False})).json()
    assert whole["message"]["thinking"] and whole["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


# 17, 18, 19
async def test_17_18_19_request_fields_reach_upstream_byte_identical(client: httpx.AsyncClient,
                                                                   fake: FakeOllama) -> None:
    bodies = []
    for keep_alive in (300, "5m", -1, 0):
        for fmt in ("json", {"type": "object", "properties": {"a": {"type": "string"}}}):
            bodies.append({
                "model": "qwen3:latest", "format": fmt, "keep_alive": keep_alive, "think": "high",
                "options": {"temperature": 0.2, "num_ctx": 4096, "seed": 7, "stop": ["x"], "weird_key": 1},
                "tools": [], "truncate": False, "logprobs": True,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "look", "images": ["aGVsbG8="]},
                    {"role": "assistant", "tool_calls": [{"id": "call_1", "function": {
                        "index": 0, "name": "f", "arguments": {"a": 1}}}]},
                    {"role": "tool", "content": "42", "tool_name": "f", "tool_call_id": "call_1"},
                    {"role": "user"},  # no content at all (ollama-python drops empty fields)
                ],
                "stream": False,
            })
    for body in bodies:
        raw = json.dumps(body, indent=1).encode()  # unusual spacing must survive too
        response = await client.post("/api/chat", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 200
        assert fake.requests_to("/api/chat")[-1].body == raw


# 20
async def test_20_load_request(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/chat", json={"model": MODEL, "messages": []})
    assert response.status_code == 200
    assert response.json()["done_reason"] == "load"
    unload = await client.post("/api/chat", json={"model": MODEL, "messages": [], "keep_alive": 0})
    assert unload.json()["done_reason"] == "unload"


# 21
@pytest.mark.parametrize("stream", [True, False])
async def test_21_upstream_404_passes_through(client: httpx.AsyncClient, stream: bool) -> None:
    response = await client.post("/api/chat", json={"model": "ghost", "messages": [{"role": "user", "content": "x"}],
                                                    "stream": stream})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"error": "model 'ghost' not found"}


@pytest.mark.parametrize(("model", "status"), [("fail-500", 500), ("busy-503", 503)])
async def test_upstream_error_statuses_pass_through_unchanged(client: httpx.AsyncClient, fake: FakeOllama,
                                                              model: str, status: int) -> None:
    response = await client.post("/api/chat", json={"model": model, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == status
    direct = await httpx.AsyncClient(transport=fake.transport(), base_url="http://u").post(
        "/api/chat", json={"model": model, "messages": [{"role": "user", "content": "x"}]})
    assert response.content == direct.content


# 23
async def test_23_midstream_error_line_passes_through(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/chat", json={"model": "midstream-error",
                                                    "messages": [{"role": "user", "content": "x"}]})
    lines = ndjson(response)
    assert "error" in lines[-1]
    assert not any(line.get("done") for line in lines)


# 24 is covered item by item in test_bad_input.py


# 26
async def test_26_generate(client: httpx.AsyncClient) -> None:
    lines = ndjson(await client.post("/api/generate", json={"model": MODEL, "prompt": "hi"}))
    assert all(isinstance(line["response"], str) for line in lines)
    final = lines[-1]
    assert final["done"] and final["done_reason"] and isinstance(final["context"], list)
    assert all(type(final[m]) is int for m in METRICS)
    whole = (await client.post("/api/generate", json={"model": MODEL, "prompt": "hi", "stream": False})).json()
    assert isinstance(whole["response"], str) and whole["response"] and isinstance(whole["context"], list)


# 27, 28
async def test_27_28_embeddings(client: httpx.AsyncClient) -> None:
    two = (await client.post("/api/embed", json={"model": "nomic-embed-text", "input": ["a", "b"]})).json()
    assert two["model"] and len(two["embeddings"]) == 2
    one = (await client.post("/api/embed", json={"model": "nomic-embed-text", "input": "a"})).json()
    assert len(one["embeddings"]) == 1
    legacy = (await client.post("/api/embeddings", json={"model": "nomic-embed-text", "prompt": "a"})).json()
    assert legacy["embedding"] and all(isinstance(x, float) for x in legacy["embedding"])
    bad = await client.post("/api/embed", json={"model": "nomic-embed-text", "input": 5})
    assert bad.status_code == 400 and bad.json() == {"error": "invalid input type"}


# 29 (tasks are forwarded untouched: nothing augments yet, so every chat is byte-identical)
async def test_29_task_requests_are_forwarded_untouched(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    body = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": (
        "### Task:\nGenerate a concise title.\n<chat_history>\nUSER: hi\n</chat_history>")}]}
    raw = json.dumps(body).encode()
    await client.post("/api/chat", content=raw, headers={"x-task": "title_generation"})
    sent = fake.requests_to("/api/chat")[-1]
    # the body as it came; X-Task is addressed to GraphGate and stays here (issue 29, item 2)
    assert sent.body == raw and "x-task" not in sent.headers


# 31
async def test_31_model_management(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    pull = ndjson(await client.post("/api/pull", json={"model": "tinyllama"}))
    assert all("status" in line for line in pull) and pull[-1] == {"status": "success"}
    single = await client.post("/api/pull", json={"model": "tinyllama", "stream": False})
    assert single.json() == {"status": "success"}
    push = ndjson(await client.post("/api/push", json={"model": "tinyllama"}))
    assert push[-1] == {"status": "success"}
    create = ndjson(await client.post("/api/create", json={"model": "mine", "from": MODEL}))
    assert create[-1] == {"status": "success"}
    copied = await client.post("/api/copy", json={"source": MODEL, "destination": "copy-of"})
    assert copied.status_code == 200 and copied.content == b""
    missing = await client.post("/api/copy", json={"source": "ghost", "destination": "x"})
    assert missing.status_code == 404 and missing.json()["error"]
    deleted = await client.request("DELETE", "/api/delete", json={"model": "copy-of"})
    assert deleted.status_code == 200 and deleted.content == b""
    gone = await client.request("DELETE", "/api/delete", json={"model": "copy-of"})
    assert gone.status_code == 404 and gone.json()["error"]


async def test_blobs(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    data = b"GGUF" + bytes(range(256)) * 64
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 404
    created = await client.post(f"/api/blobs/{digest}", content=data)
    assert created.status_code == 201
    assert fake.requests_to(f"/api/blobs/{digest}")[-1].body == data
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 200
    again = await client.post(f"/api/blobs/{digest}", content=data)
    assert again.status_code == 200  # Ollama: already stored
    other = "sha256:" + hashlib.sha256(b"other").hexdigest()
    wrong = await client.post(f"/api/blobs/{other}", content=b"not other")
    assert wrong.status_code == 400 and wrong.json()["error"]


# 32
async def test_32_trailing_slash_and_unknown_path(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/tags/", follow_redirects=True)
    assert response.status_code == 200 and "models" in response.json()
    assert (await client.get("/api/nope")).status_code == 404


# 33
async def test_33_cors_preflight_and_header_hygiene(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    preflight = await client.options("/api/chat", headers={
        "origin": "http://localhost:3000", "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert 200 <= preflight.status_code < 300
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert fake.requests == []
    response = await client.post("/api/chat", json=chat_body(stream=False), headers={
        "origin": "http://localhost:3000", "referer": "http://localhost:3000/c/1", "connection": "keep-alive",
        "keep-alive": "timeout=5", "x-custom": "kept"})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "http://localhost:3000"
    sent = fake.requests_to("/api/chat")[-1].headers
    assert "origin" not in sent and "referer" not in sent and "keep-alive" not in sent
    assert sent["host"] == "127.0.0.1:11434"
    assert sent["x-custom"] == "kept"


async def test_33_foreign_origin_is_refused(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await client.post("/api/chat", json=chat_body(), headers={"origin": "https://evil.example"})
    assert response.status_code == 403
    assert "not allowed" in response.json()["error"]
    assert fake.requests == []


# 34
async def test_34_v1_models(client: httpx.AsyncClient) -> None:
    data = (await client.get("/v1/models")).json()
    assert data["object"] == "list"
    for entry in data["data"]:
        assert entry["object"] == "model" and isinstance(entry["created"], int)
        assert isinstance(entry["id"], str) and isinstance(entry["owned_by"], str)
    one = await client.get(f"/v1/models/{MODEL}")
    assert one.status_code == 200 and one.json()["id"] == MODEL
    missing = await client.get("/v1/models/ghost:latest")
    assert missing.status_code == 404 and missing.json()["error"]["message"]


# 35
async def test_35_v1_chat_completions(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "".join(fake.reply)
    whole = (await client.post("/v1/chat/completions", json={**body, "stream": False})).json()
    assert whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"]["content"] == "".join(fake.reply)
    assert set(whole["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}


async def test_v1_completions(client: httpx.AsyncClient) -> None:
    whole = (await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})).json()
    assert whole["choices"][0]["text"]


# 36
async def test_36_v1_embeddings(client: httpx.AsyncClient) -> None:
    data = (await client.post("/v1/embeddings", json={"model": "nomic-embed-text", "input": "hello"})).json()
    assert data["object"] == "list" and data["model"]
    assert data["data"][0]["object"] == "embedding" and data["data"][0]["index"] == 0
    assert data["data"][0]["embedding"] and set(data["usage"]) >= {"prompt_tokens", "total_tokens"}
