"""Chat augmentation: what is augmented, what is forwarded untouched, prefixes, the header, /context,
failures, the context window (num_ctx) and the answer cache."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.background import background_written
from tests.chat_helpers import MODEL, body, chats, ingest, traces
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload

pytestmark = pytest.mark.anyio


@pytest.fixture
async def gw(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        yield client


async def test_a_normal_turn_gets_a_system_message_with_context(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await gw.post("/api/chat", json=body())
    assert response.status_code == 200 and response.json()["message"]["content"] == "".join(fake.reply)
    sent = chats(fake)[-1].json
    assert sent["messages"][0]["role"] == "system"
    system = sent["messages"][0]["content"]
    assert "## Entities (knowledge graph)" in system and "Acme Corp" in system
    assert sent["messages"][1:] == body()["messages"]
    [trace] = await traces(gw)
    assert trace["augmented"] and trace["mode"] == "mix" and trace["detail"]["entities"]
    assert set(trace["detail"]["timings"]) >= {"keywords", "embedding", "graph", "chunks", "context", "total"}


async def test_existing_system_message_is_kept_and_extended(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Who is Bob Jones?"}]
    await gw.post("/api/chat", json={"model": MODEL, "messages": messages, "stream": False})
    sent = chats(fake)[-1].json["messages"]
    assert len(sent) == 2
    assert sent[0]["content"].startswith("You are terse.\n\n") and "## Entities" in sent[0]["content"]
    assert sent[1] == messages[1]


async def test_everything_else_reaches_the_upstream_unchanged(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    request: dict[str, Any] = {"model": "qwen3:latest", "stream": True, "think": "high", "keep_alive": "5m",
               "format": {"type": "object", "properties": {"answer": {"type": "string"}}},
               "options": {"temperature": 0.1, "seed": 3, "num_ctx": 8192}, "tools": tools, "truncate": False,
               "messages": [{"role": "user", "content": "What is in this picture of Berlin?", "images": ["aGVsbG8="]}]}
    await gw.post("/api/chat", json=request)
    sent = [r.json for r in fake.requests_to("/api/chat") if r.json.get("tools")][-1]
    for key in ("model", "stream", "think", "keep_alive", "format", "options", "tools", "truncate"):
        assert sent[key] == request[key], key
    assert sent["messages"][1] == request["messages"][0]  # images included
    assert sent["messages"][0]["role"] == "system"


@pytest.mark.parametrize(("case", "request_body", "headers"), [
    ("task header", body(), {"x-task": "title_generation"}),
    ("task template", body("### Task:\nGenerate a title.\n<chat_history>\nUSER: hi\n</chat_history>"), {}),
    ("assistant last", {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "Tell me about Acme Corp"}, {"role": "assistant", "content": "Acme is"}]}, {}),
    ("tool result with no question", {"model": MODEL, "stream": False, "messages": [
        {"role": "system", "content": "You call tools."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"}]}, {}),
    ("load", {"model": MODEL, "messages": []}, {}),
    ("embedding model", {"model": "nomic-embed-text:latest", "stream": False,
                         "messages": [{"role": "user", "content": "Acme Corp?"}]}, {}),
])
async def test_forwarded_untouched(gw: httpx.AsyncClient, fake: FakeOllama, case: str, request_body: dict[str, Any],
                                   headers: dict[str, str]) -> None:
    raw = json.dumps(request_body).encode()
    await gw.post("/api/chat", content=raw, headers=headers)
    assert chats(fake)[-1].body == raw, case


async def test_a_tool_continuation_is_grounded_in_its_question(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    """The model called a tool; the client sends its result back, resending its own messages without the
    context of the turn that called the tool: the answer is written now, so the question's context is
    injected again (the prefix stripped again), and the tool's exchange reaches the model as it was."""
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]}
    result = {"role": "tool", "content": "2026-11-25", "tool_call_id": "c1"}
    await gw.post("/api/chat", json={"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "/local Who works at Acme Corp?"}, call, result]})
    sent = chats(fake)[-1].json["messages"]
    assert sent[0]["role"] == "system" and "Bob Jones" in sent[0]["content"]
    assert sent[1:] == [{"role": "user", "content": "Who works at Acme Corp?"}, call, result]


async def test_unsubstituted_task_template_header_is_no_task(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    await gw.post("/api/chat", json=body(), headers={"x-task": "{{TASK}}"})
    assert chats(fake)[-1].json["messages"][0]["role"] == "system"


async def test_empty_knowledge_base_forwards_untouched(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        raw = json.dumps(body()).encode()
        await client.post("/api/chat", content=raw)
    assert chats(fake)[-1].body == raw


async def test_bypass_prefix_is_stripped_and_nothing_injected(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    await gw.post("/api/chat", json=body("/bypass Who works at Acme Corp?"))
    assert chats(fake)[-1].json["messages"] == [{"role": "user", "content": "Who works at Acme Corp?"}]


@pytest.mark.parametrize(("prefix", "mode", "instructions"), [
    ("/local ", "local", None), ("/global ", "global", None), ("/hybrid ", "hybrid", None),
    ("/naive ", "naive", None), ("/mix ", "mix", None), ("/[answer in one line] ", "mix", "answer in one line"),
    ("/local[use bullet points] ", "local", "use bullet points"),
])
async def test_mode_prefixes(gw: httpx.AsyncClient, fake: FakeOllama, prefix: str, mode: str,
                             instructions: str | None) -> None:
    await gw.post("/api/chat", json=body(prefix + "Who works at Acme Corp?"))
    sent = chats(fake)[-1].json["messages"]
    assert sent[-1]["content"] == "Who works at Acme Corp?"
    if instructions:
        assert f"Additional instructions from the user:\n{instructions}" in sent[0]["content"]
    assert (await traces(gw))[0]["mode"] == mode


async def test_mode_header(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    await gw.post("/api/chat", json=body(), headers={"x-graphgate-mode": "naive"})
    assert (await traces(gw))[0]["mode"] == "naive"
    bad = await gw.post("/api/chat", json=body(), headers={"x-graphgate-mode": "deep"})
    assert bad.status_code == 400 and "X-GraphGate-Mode" in bad.json()["error"]


@pytest.mark.parametrize("stream", [False, True])
async def test_context_prefix_answers_with_the_context_ollama(gw: httpx.AsyncClient, fake: FakeOllama,
                                                              stream: bool) -> None:
    before = len(chats(fake))
    response = await gw.post("/api/chat", json=body("/localcontext Who works at Acme Corp?", stream=stream))
    assert len(chats(fake)) == before  # no upstream chat
    if stream:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.text.splitlines()]
        assert lines[-1]["done"] is True and all(type(lines[-1][m]) is int for m in ("eval_count", "total_duration"))
        text = "".join(line["message"]["content"] for line in lines)
    else:
        data = response.json()
        assert data["done"] is True and data["message"]["role"] == "assistant"
        text = data["message"]["content"]
    assert "## Entities (knowledge graph)" in text and "Acme Corp" in text
    assert (await traces(gw))[0]["mode"] == "local"


@pytest.mark.parametrize("stream", [False, True])
async def test_context_prefix_answers_with_the_context_openai(gw: httpx.AsyncClient, fake: FakeOllama,
                                                              stream: bool) -> None:
    request = {"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": "/context Acme Corp?"}]}
    response = await gw.post("/v1/chat/completions", json=request)
    if stream:
        events = [e[6:] for e in response.text.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        text = "".join((json.loads(e)["choices"] or [{}])[0].get("delta", {}).get("content", "") for e in events[:-1])
    else:
        data = response.json()
        assert data["object"] == "chat.completion"
        text = data["choices"][0]["message"]["content"]
    assert "## Entities" in text


async def test_openai_chat_is_augmented(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    request = {"model": MODEL, "stream": False,
               "messages": [{"role": "user", "content": [{"type": "text", "text": "/local Who is Bob Jones?"}]}]}
    response = await gw.post("/v1/chat/completions", json=request)
    assert response.json()["choices"][0]["message"]["content"] == "".join(fake.reply)
    sent = chats(fake)[-1].json["messages"]
    assert sent[0]["role"] == "system" and "Bob Jones" in sent[0]["content"]
    assert sent[1]["content"] == [{"type": "text", "text": "Who is Bob Jones?"}]


async def test_retrieval_failure_forwards_the_turn_unaugmented(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    fake.fail_paths["/api/embed"] = 500
    response = await gw.post("/api/chat", json=body())
    assert response.status_code == 200
    assert chats(fake)[-1].json["messages"] == body()["messages"]
    trace = (await traces(gw))[0]
    assert not trace["augmented"] and trace["reason"].startswith("retrieval failed")


async def test_retrieval_timeout_forwards_the_turn_unaugmented(settings: Settings, fake: FakeOllama,
                                                              facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(retrieval_timeout=0.3), fake) as client:
        await ingest(client)
        fake.hang_paths.add("/api/embed")
        response = await client.post("/api/chat", json=body())
        assert response.status_code == 200
        assert chats(fake)[-1].json["messages"] == body()["messages"]
        assert (await traces(client))[0]["reason"] == "retrieval timed out"


async def test_generate_is_not_augmented_by_default(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    raw = json.dumps({"model": MODEL, "prompt": "Who works at Acme Corp?", "stream": False}).encode()
    await gw.post("/api/generate", content=raw)
    assert fake.requests_to("/api/generate")[-1].body == raw


async def test_generate_is_augmented_when_enabled(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(augment_generate=True), fake) as client:
        await ingest(client)
        await client.post("/api/generate", json={"model": MODEL, "prompt": "/local Who works at Acme Corp?",
                                                 "system": "Be brief.", "stream": False})
        sent = fake.requests_to("/api/generate")[-1].json
        assert sent["prompt"] == "Who works at Acme Corp?"
        assert sent["system"].startswith("Be brief.\n\n") and "## Entities" in sent["system"]
        raw = json.dumps({"model": MODEL, "prompt": "Acme Corp?", "raw": True, "stream": False}).encode()
        await client.post("/api/generate", content=raw)
        assert fake.requests_to("/api/generate")[-1].body == raw


async def test_official_client_through_augmentation(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    import ollama

    from proxy.app import create_app
    from tests.live import serve_in_thread

    with fake.serve() as upstream:
        app = create_app(settings.replace(upstream=upstream))
        with serve_in_thread(app) as url:
            client = ollama.Client(host=url)
            async with httpx.AsyncClient(base_url=url) as plain:
                for name, text in (("team.txt", TEAM), ("city.md", CITY)):
                    await plain.post("/rag/documents", json={"name": name, "text": text})
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    if (await plain.get("/rag/stats")).json()["documents"]["processed"] >= 2:
                        break
                    await anyio.sleep(0.05)
            reply = client.chat(model=MODEL, messages=[{"role": "user", "content": "Who works at Acme Corp?"}])
            assert reply.message.content == "".join(fake.reply)
            parts = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "/context Acme Corp"}],
                                     stream=True))
            assert "## Entities" in "".join(p.message.content or "" for p in parts)
    assert "## Entities" in chats(fake)[-1].json["messages"][0]["content"]


# --- the context window (num_ctx) ---

async def window_of(client: httpx.AsyncClient, request: dict[str, Any]) -> dict[str, Any]:
    await client.post("/api/chat", json=request)
    return (await traces(client))[0]["detail"]["budget"]


@pytest.mark.parametrize("num_ctx", [2048, 4096, 32768])
async def test_window_from_the_request(gw: httpx.AsyncClient, num_ctx: int) -> None:
    budget = await window_of(gw, body(options={"num_ctx": num_ctx}))
    assert (budget["window"], budget["window_source"]) == (num_ctx, "request")
    assert budget["total"] == min(num_ctx - budget["conversation"] - 1024 - 64, 30000)


@pytest.mark.parametrize("num_ctx", [2048, 4096, 32768])
async def test_window_from_the_model_parameters(gw: httpx.AsyncClient, fake: FakeOllama, num_ctx: int) -> None:
    fake.models[MODEL]["parameters"] = f"num_ctx {num_ctx}"
    budget = await window_of(gw, body())
    assert (budget["window"], budget["window_source"]) == (num_ctx, "model")


@pytest.mark.parametrize("num_ctx", [2048, 4096, 32768])
async def test_window_from_the_setting(settings: Settings, fake: FakeOllama, facts: KnownFacts, num_ctx: int) -> None:
    async with gateway_client(settings.replace(default_num_ctx=num_ctx), fake) as client:
        await ingest(client)
        budget = await window_of(client, {**body(), "model": "qwen3:latest"})  # no num_ctx parameter
        assert (budget["window"], budget["window_source"]) == (num_ctx, "setting")
        assert budget["entity"] == int(6000 * budget["total"] / 30000)


async def test_injected_context_fits_the_window(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    from proxy.core.tokens import get_tokenizer

    await gw.post("/api/chat", json=body(options={"num_ctx": 2048}))
    sent = chats(fake)[-1].json
    count = get_tokenizer().count
    used = sum(count(m["content"]) + 4 for m in sent["messages"])
    assert used <= 2048 - 1024
    assert sent["options"] == {"num_ctx": 2048}  # options unchanged


async def test_long_history_leaves_no_room(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 400} for i in range(8)]
    request = {"model": MODEL, "stream": False, "options": {"num_ctx": 2048},
               "messages": [*history, {"role": "user", "content": "Who works at Acme Corp?"}]}
    await gw.post("/api/chat", json=request)
    assert chats(fake)[-1].json["messages"] == request["messages"]
    trace = (await traces(gw))[0]
    assert not trace["augmented"] and "leave no room" in trace["reason"]


async def test_raise_num_ctx_within_the_model_limit(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(raise_num_ctx=True), fake) as client:
        await ingest(client)
        await client.post("/api/chat", json=body())
        raised = chats(fake)[-1].json["options"]["num_ctx"]
        assert 30000 + 1024 < raised <= 131072
        fake.models[MODEL]["model_info"] = {"general.architecture": "llama", "llama.context_length": 16384}
        client._transport.app.state.gateway.knowledge.model_info._entries.clear()  # type: ignore[attr-defined]
        await client.post("/api/chat", json=body())
        assert chats(fake)[-1].json["options"]["num_ctx"] == 16384
        await client.post("/api/chat", json=body(options={"num_ctx": 4096}))
        assert chats(fake)[-1].json["options"] == {"num_ctx": 4096}  # the client's own value wins


async def test_options_untouched_without_raise(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    await gw.post("/api/chat", json=body())
    assert "options" not in chats(fake)[-1].json


# --- answer cache ---

async def test_answer_cache_hits_and_invalidates(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(answer_cache=True), fake) as client:
        await ingest(client)
        first = await client.post("/api/chat", json=body())
        await background_written()   # the answer is cached in the background
        upstream_calls = len(chats(fake))
        second = await client.post("/api/chat", json=body())
        assert second.headers.get("x-graphgate-cache") == "hit" and second.json() == first.json()
        assert len(chats(fake)) == upstream_calls
        await settle(client, (await upload(client, "more.txt", "Carol White visited Acme Corp."))["id"])
        third = await client.post("/api/chat", json=body())
        assert "x-graphgate-cache" not in third.headers
        assert len(chats(fake)) == upstream_calls + 1
        streamed = await client.post("/api/chat", json=body(stream=True))
        assert "x-graphgate-cache" not in streamed.headers


# --- found in review ---

async def test_prefix_on_an_openai_parts_message_touches_only_its_part(gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    parts = [{"type": "text", "text": "/local what is"}, {"type": "image_url", "image_url": {"url": "data:x"}},
             {"type": "text", "text": "Acme Corp doing?"}]
    await gw.post("/v1/chat/completions", json={"model": MODEL, "stream": False,
                                                "messages": [{"role": "user", "content": parts}]})
    sent = chats(fake)[-1].json["messages"][-1]["content"]
    assert sent == [{"type": "text", "text": "what is"}, parts[1], parts[2]]


async def test_context_prefix_never_reaches_the_model_even_without_room(gw: httpx.AsyncClient,
                                                                         fake: FakeOllama) -> None:
    before = len(chats(fake))
    history = [{"role": "user", "content": "word " * 900}, {"role": "assistant", "content": "ok"}]
    response = await gw.post("/api/chat", json={"model": MODEL, "stream": False, "options": {"num_ctx": 1024},
                                                "messages": [*history, {"role": "user", "content": "/context Acme?"}]})
    assert response.json()["message"]["content"].startswith("(The knowledge base has nothing")
    assert len(chats(fake)) == before


async def test_generate_with_answer_cache_calls_the_model_once_with_context(settings: Settings, fake: FakeOllama,
                                                                           facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(augment_generate=True, answer_cache=True), fake) as client:
        await ingest(client)
        await client.post("/api/generate", json={"model": MODEL, "prompt": "Who works at Acme Corp?",
                                                 "stream": False})
        [sent] = fake.requests_to("/api/generate")
        assert "messages" not in sent.json and "## Entities" in sent.json["system"]


async def test_a_saturated_upstream_skips_the_keyword_call_instead_of_delaying_the_turn(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    from proxy.core.limiter import Priority

    async with gateway_client(settings.replace(keyword_wait=0.2, llm_concurrency=1), fake) as client:
        await ingest(client)
        limiter = client._transport.app.state.gateway.knowledge.models.limiter  # type: ignore[attr-defined]
        async with limiter.slot(Priority.INGEST):  # an extraction call holds the only slot
            with anyio.fail_after(30):   # a turn that waited for the slot would wait for good
                response = await client.post("/api/chat", json=body("Who works at Acme Corp?"))
        assert response.status_code == 200
        system = chats(fake)[-1].json["messages"][0]
        assert system["role"] == "system" and "Acme Corp" in system["content"]  # augmented all the same
        [trace] = await traces(client)
        assert trace["augmented"] and trace["detail"]["keywords"]["source"] == "busy"
        assert not [c for c in facts.calls if c == "keywords"]  # no keyword call reached the model
