"""Knowledge models (issue 20, part 2: proxy/control/models.py, grounding.py, model_lists.py):
aliases that every Ollama client lists and chats with, each grounded in its own knowledge base and
forwarded as its base model, the reply renamed back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from proxy.app import Settings
from proxy.gateway.renaming import ReplyRenamer
from tests.chat_helpers import MODEL, chats
from tests.conftest import gateway_client
from tests.corpus import CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.test_knowledge_bases import create, upload

pytestmark = pytest.mark.anyio

QUESTION = "What does Alice Smith do?"


async def put(client: httpx.AsyncClient, alias: str, **spec: Any) -> httpx.Response:
    return await client.put(f"/rag/models/{alias}", json=spec)


async def two_bases(client: httpx.AsyncClient) -> None:
    """hr knows Alice Smith from the team (Orion), legal from the chess club: the same name, other facts."""
    await create(client, "hr")
    await create(client, "legal")
    await upload(client, "hr", "team.txt", TEAM)
    await upload(client, "legal", "club.txt", CLUB)
    assert (await put(client, "hr-bot", model=MODEL, kb="hr", system="You answer HR questions.",
                      options={"temperature": 0.1, "top_k": 7})).status_code == 201
    assert (await put(client, "legal-bot", model=MODEL, kb="legal", mode="local")).status_code == 201


def last_chat(fake: FakeOllama) -> dict[str, Any]:
    """The last user chat that reached the upstream, by either API (in the order they arrived)."""
    return next(r.json for r in reversed(fake.requests) if r.path in ("/api/chat", "/v1/chat/completions")
                and r.json is not None and not isinstance(r.json.get("format"), dict))


def context_of(sent: dict[str, Any]) -> str:
    return json.dumps(sent["messages"])


async def traces_of(client: httpx.AsyncClient, kb: str, wanted: int) -> list[dict[str, Any]]:
    with anyio.fail_after(10):
        while True:
            found = (await client.get("/rag/traces", params={"kb": kb})).json()["traces"]
            if len(found) >= wanted:
                return found
            await anyio.sleep(0.05)


async def test_a_chat_with_a_knowledge_model_is_grounded_in_its_base_only(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await two_bases(client)
        message = {"role": "user", "content": QUESTION}
        # Ollama's API, streamed: every line carries the alias's name, none the base model's
        async with client.stream("POST", "/api/chat", json={"model": "hr-bot", "messages": [message]}) as reply:
            assert reply.status_code == 200
            lines = [json.loads(line) async for line in reply.aiter_lines() if line.strip()]
        assert lines and all(line["model"] == "hr-bot" for line in lines), lines
        assert lines[-1]["done"] is True
        sent = last_chat(fake)
        assert sent["model"] == MODEL   # forwarded as the base model
        assert sent["messages"][0] == {"role": "system", "content": "You answer HR questions."} or \
            "You answer HR questions." in sent["messages"][0]["content"]
        assert "Orion" in context_of(sent) and "chess" not in context_of(sent)
        assert sent["options"]["temperature"] == 0.1 and sent["options"]["top_k"] == 7

        # the request's own options and system prompt win over the knowledge model's
        own = {"model": "hr-bot:latest", "stream": False, "options": {"temperature": 0.9},
               "messages": [{"role": "system", "content": "Be terse."}, message]}
        reply = await client.post("/api/chat", json=own)
        assert reply.status_code == 200 and reply.json()["model"] == "hr-bot:latest"
        assert int(reply.headers["content-length"]) == len(reply.content)
        sent = last_chat(fake)
        assert sent["options"] == {"temperature": 0.9, "top_k": 7}
        assert "You answer HR questions." not in context_of(sent) and "Be terse." in context_of(sent)

        # the OpenAI API, streamed and not
        openai = {"model": "legal-bot", "messages": [message], "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=openai) as reply:
            events = [json.loads(line[6:]) async for line in reply.aiter_lines()
                      if line.startswith("data: {")]
        assert events and all(event["model"] == "legal-bot" for event in events)
        sent = last_chat(fake)
        assert sent["model"] == MODEL
        assert "chess" in context_of(sent) and "Orion" not in context_of(sent)
        reply = await client.post("/v1/chat/completions", json={**openai, "stream": False})
        assert reply.json()["model"] == "legal-bot"

        # traces: each in its own base, under the alias's name and mode; none in default
        hr = await traces_of(client, "hr", 2)
        legal = await traces_of(client, "legal", 2)
        assert {t["model"] for t in hr} == {"hr-bot", "hr-bot:latest"} and all(t["augmented"] for t in hr)
        assert {t["model"] for t in legal} == {"legal-bot"} and {t["mode"] for t in legal} == {"local"}
        assert (await client.get("/rag/traces")).json()["traces"] == []

        # a plain model is grounded in default (empty here), as before knowledge models
        await client.post("/api/chat", json={"model": MODEL, "messages": [message], "stream": False})
        assert last_chat(fake)["messages"] == [message]


async def test_knowledge_models_are_listed_and_described_as_their_base_model(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        assert (await put(client, "hr-bot", model=MODEL, kb="hr")).status_code == 201
        assert (await put(client, "team/ghost:v1", model="ghost:latest", kb="hr")).status_code == 201

        tags = {m["name"]: m for m in (await client.get("/api/tags")).json()["models"]}
        assert {"llama3.2:latest", "qwen3:latest", "hr-bot:latest"} <= set(tags)
        alias, base = tags["hr-bot:latest"], tags[MODEL]
        assert alias["model"] == "hr-bot:latest"
        assert {k: v for k, v in alias.items() if k not in ("name", "model")} == \
            {k: v for k, v in base.items() if k not in ("name", "model")}
        assert "team/ghost:v1" not in tags   # its base model is missing upstream: it could not chat

        shown = await client.post("/api/show", json={"model": "hr-bot"})
        base_shown = await client.post("/api/show", json={"model": MODEL})
        assert shown.status_code == 200 and shown.json() == base_shown.json()
        assert shown.json()["model_info"]["llama.context_length"] == 131072
        assert "completion" in shown.json()["capabilities"]
        legacy = await client.post("/api/show", json={"name": "hr-bot:latest"})
        assert legacy.json() == base_shown.json()

        running = {m["name"]: m for m in (await client.get("/api/ps")).json()["models"]}
        assert MODEL in running and running["hr-bot:latest"]["size_vram"] == running[MODEL]["size_vram"]

        v1 = {m["id"]: m for m in (await client.get("/v1/models")).json()["data"]}
        assert "hr-bot:latest" in v1 and v1["hr-bot:latest"]["owned_by"] == v1[MODEL]["owned_by"]
        one = await client.get("/v1/models/hr-bot:latest")
        assert one.status_code == 200 and one.json()["id"] == "hr-bot:latest"

        listed = {m["alias"]: m for m in (await client.get("/rag/models")).json()["models"]}
        assert listed["hr-bot:latest"]["base_model_present"] is True
        assert listed["team/ghost:v1"]["base_model_present"] is False
        # a chat with it gets Ollama's own not-found error
        reply = await client.post("/api/chat", json={"model": "team/ghost:v1", "stream": False,
                                                     "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 404 and "not found" in reply.json()["error"]


async def test_bad_knowledge_models_are_refused_and_change_nothing(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        bad = [
            ("bad name!", {"model": MODEL, "kb": "hr"}, "invalid knowledge model name"),
            ("ok", {"kb": "hr"}, "invalid base model"),
            ("ok", {"model": MODEL, "kb": "nowhere"}, "no knowledge base named 'nowhere'"),
            ("ok", {"model": MODEL, "kb": "hr", "mode": "deep"}, "invalid mode"),
            ("ok", {"model": MODEL, "kb": "hr", "options": [1]}, "options must be an object"),
            ("ok", {"model": MODEL, "kb": "hr", "system": 3}, "system must be a string"),
            ("ok", {"model": MODEL, "kb": "hr", "colour": "red"}, "unknown field 'colour'"),
            ("ok", {"model": "ok", "kb": "hr"}, "its own base model"),
        ]
        for alias, spec, message in bad:
            reply = await client.put(f"/rag/models/{alias}", json=spec)
            assert reply.status_code == 400 and message in reply.json()["error"], (alias, spec, reply.text)
        reply = await put(client, "qwen3", model=MODEL, kb="hr")   # the upstream's own name
        assert reply.status_code == 409 and "upstream has a model named" in reply.json()["error"]
        assert (await client.put("/rag/models/ok", content=b"{")).status_code == 400
        assert (await client.get("/rag/models")).json()["models"] == []
        assert not (settings.data_dir / "models.json").exists()  # noqa: ASYNC240 - a stat
        assert (await client.get("/rag/models/nothing")).status_code == 404
        assert (await client.delete("/rag/models/nothing")).status_code == 404


async def test_knowledge_models_persist_replace_and_delete(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        first = (await put(client, "hr-bot", model=MODEL, kb="hr", mode="local")).json()
        replaced = await put(client, "hr-bot:latest", model="qwen3:latest", kb="default")
        assert replaced.status_code == 200   # replaced, not created
        assert replaced.json()["model"] == "qwen3:latest" and replaced.json()["mode"] is None
        assert replaced.json()["created_at"] == first["created_at"]
    stored = json.loads(Path(settings.data_dir / "models.json").read_text())  # noqa: ASYNC240 - between runs
    assert set(stored["models"]) == {"hr-bot:latest"}
    async with gateway_client(settings, fake) as client:   # a restart keeps them
        assert (await client.get("/rag/models/hr-bot")).json()["model"] == "qwen3:latest"
        assert (await client.delete("/rag/models/hr-bot")).json() == {"deleted": "hr-bot:latest"}
        assert "hr-bot:latest" not in {m["name"] for m in (await client.get("/api/tags")).json()["models"]}
        reply = await client.post("/api/chat", json={"model": "hr-bot", "stream": False,
                                                     "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 404   # the upstream's own answer: no such model


async def test_a_knowledge_model_whose_base_was_deleted_is_not_found(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        await put(client, "hr-bot", model=MODEL, kb="hr")
        assert (await client.delete("/rag/kbs/hr", params={"confirm": "hr"})).status_code == 200
        before = len(chats(fake))
        reply = await client.post("/api/chat", json={"model": "hr-bot", "stream": False,
                                                     "messages": [{"role": "user", "content": QUESTION}]})
        assert reply.status_code == 404
        assert reply.json()["error"] == "model 'hr-bot:latest' not found: its knowledge base 'hr' no longer exists"
        assert len(chats(fake)) == before   # nothing went upstream


async def test_plain_models_follow_the_plain_model_setting(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    message = {"role": "user", "content": QUESTION}
    async with gateway_client(settings.replace(plain_model_kb="hr"), fake) as client:
        await create(client, "hr")
        await upload(client, "hr", "team.txt", TEAM)
        await client.post("/api/chat", json={"model": MODEL, "messages": [message], "stream": False})
        assert "Orion" in context_of(last_chat(fake))
    async with gateway_client(settings.replace(plain_model_kb="none"), fake) as client:
        await client.post("/api/chat", json={"model": MODEL, "messages": [message], "stream": False})
        assert last_chat(fake)["messages"] == [message]
        await create(client, "legal")
        await upload(client, "legal", "club.txt", CLUB)
        await put(client, "legal-bot", model=MODEL, kb="legal")
        await client.post("/api/chat", json={"model": "legal-bot", "messages": [message], "stream": False})
        assert "chess" in context_of(last_chat(fake))   # knowledge models are grounded all the same


async def test_generate_and_embeddings_use_the_base_model(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await put(client, "helper", model=MODEL, kb="default", system="Answer in French.",
                  options={"temperature": 0.3})
        reply = await client.post("/api/generate", json={"model": "helper", "prompt": "hello", "stream": False})
        assert reply.status_code == 200 and reply.json()["model"] == "helper"
        sent = fake.requests_to("/api/generate")[-1].json
        assert sent["model"] == MODEL and sent["system"] == "Answer in French."
        assert sent["options"] == {"temperature": 0.3}
        await put(client, "embedder", model="nomic-embed-text:latest", kb="default")
        reply = await client.post("/api/embed", json={"model": "embedder", "input": "hello"})
        assert reply.status_code == 200 and reply.json()["model"] == "embedder"
        assert fake.requests_to("/api/embed")[-1].json["model"] == "nomic-embed-text:latest"


def test_the_renamer_rewrites_whole_lines_only() -> None:
    renamer = ReplyRenamer("llama3.2:latest", "hr-bot")
    line = b'{"model":"llama3.2:latest","message":{"content":"the \\"model\\":\\"llama3.2:latest\\" key"}}\n'
    cut = len(line) // 3
    out = renamer.chunk(line[:cut]) + renamer.chunk(line[cut:] + line[:5]) + renamer.chunk(line[5:]) + renamer.flush()
    expected = line.replace(b'{"model":"llama3.2:latest"', b'{"model":"hr-bot"', 1)
    assert out == expected * 2
    assert renamer.whole(b'{"model": "llama3.2:latest"}') == b'{"model": "hr-bot"}'
    assert renamer.whole(b'{"model":"llama3.2:latest-x"}') == b'{"model":"llama3.2:latest-x"}'


@pytest.mark.parametrize("content", ['{"models": {"hr-bot:latest": ', "null", "[]", '{"models": {"x": 3}}'])
async def test_an_unreadable_model_list_is_kept_and_plain_chats_go_on(settings: Settings, fake: FakeOllama,
                                                                      content: str) -> None:
    settings.data_dir.mkdir(parents=True)
    broken = settings.data_dir / "models.json"
    broken.write_text(content)   # a torn file, or one edited into another shape
    async with gateway_client(settings, fake) as client:
        reply = await client.post("/api/chat", json={"model": MODEL, "stream": False,
                                                     "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200
        refused = await put(client, "hr-bot", model=MODEL, kb="default")
        assert refused.status_code == 503 and "cannot read" in refused.json()["error"]
    assert broken.read_text() == content   # left for the operator to repair


ADMIN = {"authorization": "Bearer the-admin-key"}


async def scoped_world(client: httpx.AsyncClient) -> dict[str, str]:
    """hr and legal, one knowledge model on each; a read key and an admin key limited to hr."""
    for kb, name, text in (("hr", "team.txt", TEAM), ("legal", "club.txt", CLUB)):
        assert (await client.post("/rag/kbs", json={"name": kb}, headers=ADMIN)).status_code == 201
        await upload(client, kb, name, text, headers=ADMIN)   # processed: a chat after it is grounded
        reply = await client.put(f"/rag/models/{kb}-bot", json={"model": MODEL, "kb": kb}, headers=ADMIN)
        assert reply.status_code == 201, reply.text
    keys = {}
    for role in ("read", "admin"):
        made = await client.post("/rag/keys", json={"name": f"hr {role}", "role": role, "kbs": ["hr"]}, headers=ADMIN)
        assert made.status_code == 201, made.text
        keys[role] = made.json()["token"]
    return keys


async def test_a_scoped_key_sees_and_chats_with_its_bases_models_only(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(api_key="the-admin-key"), fake) as client:
        keys = await scoped_world(client)
        reader = {"authorization": f"Bearer {keys['read']}"}
        tags = {m["name"] for m in (await client.get("/api/tags", headers=reader)).json()["models"]}
        assert "hr-bot:latest" in tags and "legal-bot:latest" not in tags and MODEL in tags
        everything = (await client.get("/api/tags", headers=ADMIN)).json()["models"]
        assert "legal-bot:latest" in {m["name"] for m in everything}
        v1 = {m["id"] for m in (await client.get("/v1/models", headers=reader)).json()["data"]}
        assert "hr-bot:latest" in v1 and "legal-bot:latest" not in v1
        running = {m["name"] for m in (await client.get("/api/ps", headers=reader)).json()["models"]}
        assert "hr-bot:latest" in running and "legal-bot:latest" not in running
        listed = (await client.get("/rag/models", headers=reader)).json()["models"]
        assert [m["alias"] for m in listed] == ["hr-bot:latest"]

        # another base's model is a model that does not exist, on every route
        message = {"role": "user", "content": QUESTION}
        before = len(fake.requests)
        for path, body in (("/api/chat", {"model": "legal-bot", "messages": [message]}),
                           ("/v1/chat/completions", {"model": "legal-bot", "messages": [message]}),
                           ("/api/generate", {"model": "legal-bot", "prompt": "hi"}),
                           ("/api/show", {"model": "legal-bot"}),
                           ("/api/embed", {"model": "legal-bot", "input": "hi"})):
            reply = await client.post(path, json=body, headers=reader)
            assert reply.status_code == 404 and "model 'legal-bot' not found" in reply.text, (path, reply.text)
        assert (await client.get("/v1/models/legal-bot:latest", headers=reader)).status_code == 404
        assert len(fake.requests) == before   # nothing reached the upstream
        assert (await client.get("/rag/models/legal-bot", headers=reader)).status_code == 404

        # its own model: grounded in hr
        reply = await client.post("/api/chat", json={"model": "hr-bot", "messages": [message], "stream": False},
                                  headers=reader)
        assert reply.status_code == 200 and "Orion" in context_of(last_chat(fake))
        # a plain model: grounded in default, which this key may not read, so not grounded at all
        await client.put("/rag/models/x", json={"model": MODEL, "kb": "default"}, headers=ADMIN)
        await upload(client, "default", "club.txt", CLUB, headers=ADMIN)
        reply = await client.post("/api/chat", json={"model": MODEL, "messages": [message], "stream": False},
                                  headers=reader)
        assert reply.status_code == 200 and last_chat(fake)["messages"] == [message]

        # managing: a read key may not; an hr admin may on hr, and legal does not exist for it
        spec = {"model": MODEL, "kb": "hr"}
        assert (await client.put("/rag/models/new-bot", json=spec, headers=reader)).status_code == 403
        hr_admin = {"authorization": f"Bearer {keys['admin']}"}
        assert (await client.put("/rag/models/new-bot", json=spec, headers=hr_admin)).status_code == 201
        reply = await client.put("/rag/models/new-bot", json={**spec, "kb": "legal"}, headers=hr_admin)
        assert reply.status_code == 404 and "no knowledge base named 'legal'" in reply.text
        assert (await client.delete("/rag/models/legal-bot", headers=hr_admin)).status_code == 404
        assert (await client.delete("/rag/models/new-bot", headers=hr_admin)).status_code == 200


async def test_scoped_keys_may_be_kept_from_plain_models(settings: Settings, fake: FakeOllama) -> None:
    hidden = settings.replace(api_key="the-admin-key", scoped_keys_see_plain_models=False)
    async with gateway_client(hidden, fake) as client:
        keys = await scoped_world(client)
        reader = {"authorization": f"Bearer {keys['read']}"}
        tags = [m["name"] for m in (await client.get("/api/tags", headers=reader)).json()["models"]]
        assert tags == ["hr-bot:latest"]
        reply = await client.post("/api/chat", headers=reader, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": False})
        assert reply.status_code == 404 and reply.json()["error"] == f"model '{MODEL}' not found"
        assert (await client.post("/api/chat", headers=reader, json={
            "model": "hr-bot", "messages": [{"role": "user", "content": "hi"}], "stream": False})).status_code == 200
        assert len((await client.get("/api/tags", headers=ADMIN)).json()["models"]) > 1   # the admin sees all


async def test_a_knowledge_model_never_hides_an_upstream_model(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        for taken in ("Qwen3", "library/qwen3:latest", "registry.ollama.ai/library/qwen3"):   # one model for Ollama
            reply = await put(client, taken, model=MODEL, kb="hr")
            assert reply.status_code == 409 and "upstream has a model named" in reply.json()["error"], taken
        assert (await put(client, "mistral", model=MODEL, kb="hr", system="HR only.")).status_code == 201
        # through the gateway, the upstream may not make a model of a knowledge model's name
        for path, body in (("/api/pull", {"model": "mistral"}), ("/api/create", {"model": "Mistral:latest"}),
                           ("/api/copy", {"source": MODEL, "destination": "mistral"})):
            reply = await client.post(path, json=body)
            assert reply.status_code == 409 and "is the name of a knowledge model" in reply.json()["error"], path
        assert not fake.requests_to("/api/pull") and not fake.requests_to("/api/copy")
        # pulled behind the gateway's back: once the upstream lists it, the upstream's model wins
        fake.models["mistral:latest"] = {**fake.models[MODEL], "name": "mistral:latest", "model": "mistral:latest"}
        tags = [m["name"] for m in (await client.get("/api/tags")).json()["models"]]
        assert tags.count("mistral:latest") == 1
        await client.post("/api/chat", json={"model": "mistral", "stream": False,
                                             "messages": [{"role": "user", "content": "hi"}]})
        sent = last_chat(fake)
        assert sent["model"] == "mistral" and "HR only." not in json.dumps(sent["messages"])
        assert (await client.get("/rag/models/mistral")).json()["shadowed"] is True


async def test_a_knowledge_model_needs_the_upstreams_list_to_be_made(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        fake.fail_paths["/api/tags"] = 500
        reply = await put(client, "qwen3", model=MODEL, kb="default")
        assert reply.status_code == 503 and "cannot be read" in reply.json()["error"]
        assert (await client.get("/rag/models")).json()["models"] == []


async def test_context_replies_and_openai_options_of_a_knowledge_model(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        await upload(client, "hr", "team.txt", TEAM)
        await put(client, "hr-bot", model=MODEL, kb="hr",
                  options={"temperature": 0.1, "num_predict": 5, "seed": 42, "num_ctx": 4096})
        # a streamed /context reply is GraphGate's own, made under the client's name
        async with client.stream("POST", "/api/chat", json={"model": "hr-bot", "messages": [
                {"role": "user", "content": f"/context {QUESTION}"}]}) as reply:
            assert reply.status_code == 200
            lines = [json.loads(line) async for line in reply.aiter_lines() if line.strip()]
        assert {line["model"] for line in lines} == {"hr-bot"} and "Orion" in lines[0]["message"]["content"]
        # /v1 takes some of Ollama's options as its own fields; the request's own win
        await client.post("/v1/chat/completions", json={"model": "hr-bot", "seed": 7,
                                                        "messages": [{"role": "user", "content": QUESTION}]})
        sent = last_chat(fake)
        assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.1, 5, 7) and "options" not in sent


async def test_generate_with_a_knowledge_model_of_a_deleted_base_is_not_found(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(augment_generate=True), fake) as client:
        await create(client, "hr")
        await upload(client, "hr", "team.txt", TEAM)
        await put(client, "hr-bot", model=MODEL, kb="hr")
        reply = await client.post("/api/generate", json={"model": "hr-bot", "prompt": QUESTION, "stream": False})
        assert reply.status_code == 200 and reply.json()["model"] == "hr-bot"
        assert {t["model"] for t in await traces_of(client, "hr", 1)} == {"hr-bot"}
        assert (await client.delete("/rag/kbs/hr", params={"confirm": "hr"})).status_code == 200
    async with gateway_client(settings, fake) as client:   # not augmenting completions: the same 404
        before = len(fake.requests_to("/api/generate"))
        reply = await client.post("/api/generate", json={"model": "hr-bot", "prompt": "hi", "stream": False})
        assert reply.status_code == 404 and "no longer exists" in reply.json()["error"]
        assert len(fake.requests_to("/api/generate")) == before


async def test_the_metrics_need_the_admin_key_once_a_key_is_limited_to_some_bases(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings.replace(api_key="the-admin-key"), fake) as client:
        assert (await client.get("/metrics")).status_code == 200   # only the admin key: open, as before
        keys = await scoped_world(client)
        assert (await client.get("/metrics")).status_code == 401
        reply = await client.get("/metrics", headers={"authorization": f"Bearer {keys['admin']}"})
        assert reply.status_code == 403 and 'kb="legal"' not in reply.text
        assert 'kb="legal"' in (await client.get("/metrics", headers=ADMIN)).text
        # the role before the name: a read key cannot probe the names of other bases' models
        reader = {"authorization": f"Bearer {keys['read']}"}
        taken = await client.put("/rag/models/legal-bot", json={"model": MODEL, "kb": "hr"}, headers=reader)
        free = await client.put("/rag/models/free-name", json={"model": MODEL, "kb": "hr"}, headers=reader)
        assert taken.status_code == free.status_code == 403 and taken.json() == free.json()
