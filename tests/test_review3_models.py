"""Issue 29 (the third adversarial review), the upstream paths and the knowledge models:

* item 3: no path reaches the upstream above the path of ``GRAPHGATE_UPSTREAM`` (``..`` segments,
  literal or escaped, in ``/v1/models/{model:path}``, ``/api/blobs/{digest}`` and the /rag paths);
  real servers on both sides, requests written byte by byte so that ``..`` arrives unnormalised;
* item 11: a key without the admin role learns nothing of knowledge-model names, whatever the body;
* item 12: alias cycles and chains are refused, naming them;
* item 13: NaN and infinities in a knowledge model's options are refused, and none is ever emitted;
* item 9 (its knowledge-model half): a full disk (a real, small tmpfs) is a 503 saying so, and
  changes nothing.
"""

from __future__ import annotations

import json
import os
import posixpath
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from starlette.responses import PlainTextResponse

from proxy.app import Settings, create_app
from tests.conftest import gateway_client
from tests.console_helpers import post
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.test_disk_full import fill, small_disk  # noqa: F401  (small_disk: a fixture)

MODEL = "llama3.2:latest"
ADMIN = {"authorization": "Bearer the-admin-key"}

pytestmark = pytest.mark.anyio


# --- item 3: paths above the upstream's base path --------------------------------------------------

def raw_request(url: str, method: str, target: str) -> tuple[int, bytes]:
    """``method target`` sent as written (an HTTP client would resolve ``..``): (status, body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     f"Content-Length: 0\r\n\r\n".encode("latin-1"))
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


ESCAPES = [  # each would take a request above /ollama, or out of its route, if it were sent on
    "../../../../internal/secret",
    "..%2f..%2f..%2finternal%2fsecret",
    "%2e%2e/%2e%2e/%2e%2e/internal/secret",
    "%2E%2E/%2e./.%2e/internal/secret",
    "%252e%252e/%252e%252e/internal/secret",
    "..\\..\\..\\internal\\secret",
    "..%5c..%5cinternal%5csecret",
    "llama3.2/../../../internal/secret",
    "./../../internal",
    "..",
    ".",
]


PREFIX = "/ollama"


class UnderAPath:
    """The fake upstream at ``<url>/ollama``, as behind a reverse proxy: every path that reaches the
    server is kept as the server reads it (decoded); those under /ollama are the fake's to answer."""

    def __init__(self, fake: FakeOllama) -> None:
        self.fake = fake
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
            if not scope["path"].startswith(PREFIX + "/"):
                await PlainTextResponse("not under /ollama", 404)(scope, receive, send)
                return
            scope = {**scope, "path": scope["path"][len(PREFIX):], "raw_path": scope["raw_path"][len(PREFIX):]}
        await self.fake.app(scope, receive, send)


def resolved(path: str) -> str:
    """Where a server that resolves dot segments (and reads a backslash as a slash) takes ``path``."""
    return posixpath.normpath(unquote(unquote(path)).replace("\\", "/"))


@pytest.fixture
def upstream_under_a_path(fake: FakeOllama) -> UnderAPath:
    return UnderAPath(fake)


@pytest.fixture
def behind_a_path(upstream_under_a_path: UnderAPath, tmp_path: Path) -> Iterator[str]:
    """GraphGate on a real uvicorn, its upstream (the fake, on a real uvicorn) at ``<url>/ollama``."""
    with serve_in_thread(upstream_under_a_path, lifespan="off") as upstream:
        settings = Settings.load(environ={"GRAPHGATE_UPSTREAM": upstream + PREFIX,
                                          "GRAPHGATE_DATA_DIR": str(tmp_path / "data")})
        with serve_in_thread(create_app(settings)) as url:
            yield url


def test_no_path_parameter_takes_a_request_above_the_upstreams_base_path(
        behind_a_path: str, upstream_under_a_path: UnderAPath) -> None:
    url, seen = behind_a_path, upstream_under_a_path.paths
    # a plain name goes on, under the base path
    before = len(seen)
    status, body = raw_request(url, "GET", "/v1/models/llama3.2")
    assert seen[before:] == ["/ollama/v1/models/llama3.2"] and status == 200, (seen[before:], status, body)

    forwarded = [("GET", "/v1/models/"), ("HEAD", "/api/blobs/"), ("POST", "/api/blobs/")]
    own = [("GET", "/rag/models/"), ("PUT", "/rag/models/"), ("DELETE", "/rag/models/"),
           ("GET", "/rag/entities/")]
    refused = []
    for escape in ESCAPES:
        for method, prefix in forwarded + own:
            before = len(seen)
            status, body = raw_request(url, method, prefix + escape)
            reached = seen[before:]
            # GraphGate's own reads of the model list may go on meanwhile; nothing else, and all under /ollama
            assert all(resolved(p).startswith("/ollama/") for p in reached), (method, prefix + escape, reached)
            assert all(p in ("/ollama/api/tags", "/ollama/api/version") for p in reached), (
                method, prefix + escape, reached)
            assert status < 500, (method, prefix + escape, status, body)
            if (method, prefix) in forwarded and status != 404:   # 404: the route did not take it
                refused.append((method, prefix + escape, status, body))
    assert len(refused) > len(ESCAPES), "the routes took almost none of the escapes: nothing was tried"
    for method, target, status, body in refused:
        assert status == 400, (method, target, status, body)
        if method != "HEAD":
            assert b"'..' segments" in body, (method, target, body)
    # the one that was reported: its 400 says why
    status, body = raw_request(url, "GET", "/v1/models/../../../../internal/secret")
    assert status == 400 and b"'..' segments" in body
    assert not any("internal" in path for path in seen)


# --- item 11: the role before the name -------------------------------------------------------------

async def test_a_key_without_the_admin_role_learns_nothing_of_model_names(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings.replace(api_key="the-admin-key"), fake) as client:
        for base in ("alpha", "beta"):
            assert (await client.post("/rag/kbs", json={"name": base}, headers=ADMIN)).status_code == 201
        made = await client.put("/rag/models/beta-bot", json={"model": MODEL, "kb": "beta"}, headers=ADMIN)
        assert made.status_code == 201, made.text
        keys = {}
        for name, role, kbs in (("alpha reader", "read", ["alpha"]), ("reader", "read", None),
                                ("alpha writer", "write", ["alpha"])):
            body: dict[str, Any] = {"name": name, "role": role, **({"kbs": kbs} if kbs else {})}
            reply = await client.post("/rag/keys", json=body, headers=ADMIN)
            assert reply.status_code == 201, reply.text
            keys[name] = {"authorization": f"Bearer {reply.json()['token']}"}
        stored = (settings.data_dir / "models.json").read_bytes()  # noqa: ASYNC240 - a small file

        for name, headers in keys.items():
            kbs_not_named: tuple[Any, ...] = (7, None, True, ["beta"], {"name": "beta"}, 1.5)
            for kb in kbs_not_named:
                answers = set()
                for alias in ("beta-bot", "beta-bot:latest", "free-name"):
                    reply = await client.put(f"/rag/models/{alias}", json={"model": MODEL, "kb": kb}, headers=headers)
                    answers.add((reply.status_code, reply.json()["error"]))
                    assert reply.status_code == 403, (name, kb, alias, reply.text)
                assert len(answers) == 1, (name, kb, answers)   # a taken name and a free one: the same answer
        # the admin is still told, and nothing was stored meanwhile
        reply = await client.put("/rag/models/free-name", json={"model": MODEL, "kb": 7}, headers=ADMIN)
        assert reply.status_code == 400 and "no knowledge base named '7'" in reply.json()["error"]
        assert (settings.data_dir / "models.json").read_bytes() == stored  # noqa: ASYNC240


# --- item 12: cycles and chains --------------------------------------------------------------------

async def models_of(client: httpx.AsyncClient) -> dict[str, str]:
    return {m["alias"]: m["model"] for m in (await client.get("/rag/models")).json()["models"]}


async def test_alias_cycles_and_chains_are_refused_naming_them(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        assert (await client.put("/rag/models/loop-a", json={"model": "loop-b"})).status_code == 201
        assert (await client.put("/rag/models/hr-bot", json={"model": MODEL})).status_code == 201
        kept = await models_of(client)

        reply = await client.put("/rag/models/loop-b", json={"model": "loop-a"})
        assert reply.status_code == 400, reply.text
        assert "cycle" in reply.json()["error"] and "loop-b:latest -> loop-a:latest -> loop-b:latest" in reply.text

        for base in ("hr-bot", "HR-Bot:latest", "library/hr-bot"):   # one model for Ollama, however spelt
            reply = await client.put("/rag/models/deep-bot", json={"model": base})
            assert reply.status_code == 400, (base, reply.text)
            assert "chain" in reply.text and "deep-bot:latest -> hr-bot:latest -> llama3.2:latest" in reply.text

        # loop-a is grounded through loop-b: loop-b may not become a knowledge model, whatever its base
        reply = await client.put("/rag/models/loop-b", json={"model": MODEL})
        assert reply.status_code == 400 and "loop-a:latest -> loop-b:latest -> llama3.2:latest" in reply.text
        reply = await client.put("/rag/models/Self-Bot", json={"model": "self-bot:latest"})
        assert reply.status_code == 400 and "its own base model" in reply.text
        assert await models_of(client) == kept

        # replacing a model by itself (its own entry is not a chain), and an upstream base: still fine
        assert (await client.put("/rag/models/hr-bot", json={"model": "qwen3:latest"})).status_code == 200


# --- item 13: NaN and infinities -------------------------------------------------------------------

def strict_json(raw: bytes | str) -> Any:
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are no JSON."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(raw, parse_constant=refuse)


NON_FINITE = [
    (b'{"temperature": NaN}', "temperature", "NaN"),
    (b'{"temperature": Infinity}', "temperature", "an infinity"),
    (b'{"top_p": -Infinity}', "top_p", "an infinity"),
    (b'{"num_ctx": 1e999}', "num_ctx", "an infinity"),
    (b'{"stop": ["a"], "mirostat_tau": [1, NaN]}', "mirostat_tau[1]", "NaN"),
]


async def test_non_finite_options_are_refused_and_never_emitted(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        assert (await client.put("/rag/models/ok-bot", json={"model": MODEL, "options": {"temperature": 0.2}})
                ).status_code == 201
        for options, name, what in NON_FINITE:
            body = b'{"model": "llama3.2", "kb": "default", "options": ' + options + b"}"
            reply = await client.put("/rag/models/nan-bot", content=body)
            assert reply.status_code == 400, (options, reply.text)
            # refused as it is read (not JSON), naming where: the body's path to the option
            assert f"'options.{name}' is {what}" in reply.json()["error"], reply.text
            # the console's form: the same check, said above the form
            page = await post(client, "/admin/models", {"alias": "nan-bot", "model": MODEL, "kb": "default",
                                                        "mode": "", "system": "", "options": options.decode()})
            assert page.status_code == 400 and f"{name}&#39; is {what}" in page.text, (options, page.status_code)
        listed = strict_json((await client.get("/rag/models")).content)["models"]
        assert [m["alias"] for m in listed] == ["ok-bot:latest"]
        strict_json((settings.data_dir / "models.json").read_bytes())  # noqa: ASYNC240 - a small file

    # a list written before (or by hand) with NaN: its bad options are dropped, never sent on
    path = settings.data_dir / "models.json"
    stored = json.loads(path.read_text())  # noqa: ASYNC240 - between runs
    stored["models"]["ok-bot:latest"]["options"] = {"temperature": float("nan"), "top_k": 7,
                                                    "stop": ["x", float("inf")]}
    path.write_text(json.dumps(stored))  # noqa: ASYNC240
    async with gateway_client(settings, fake) as client:
        for where in ("/rag/models", "/rag/models/ok-bot", "/api/tags", "/v1/models"):
            reply = await client.get(where)
            assert reply.status_code == 200, (where, reply.text)
            strict_json(reply.content)
        assert strict_json((await client.get("/rag/models/ok-bot")).content)["options"] == {"top_k": 7}
        before = len(fake.requests)
        for where, fields in (("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
                              ("/api/generate", {"prompt": "hi"}),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
            reply = await client.post(where, json={"model": "ok-bot", "stream": False, **fields})
            assert reply.status_code == 200, (where, reply.text)
            strict_json(reply.content)
        sent = [r for r in fake.requests[before:] if r.path in ("/api/chat", "/api/generate", "/v1/chat/completions")]
        assert len(sent) >= 3
        for request in sent:
            strict_json(request.body)
        assert any(strict_json(r.body).get("options") == {"top_k": 7} for r in sent)


# --- item 9: a full disk ---------------------------------------------------------------------------

async def test_a_full_disk_refuses_a_knowledge_model_with_the_reason_and_changes_nothing(
        small_disk: Path, fake: FakeOllama) -> None:  # noqa: F811 (the fixture imported above)
    settings = Settings.load(environ={"GRAPHGATE_UPSTREAM": "http://127.0.0.1:11434",
                                      "GRAPHGATE_DATA_DIR": str(small_disk / "data")})
    stored = small_disk / "data" / "models.json"
    async with gateway_client(settings, fake) as client:
        assert (await client.put("/rag/models/kept", json={"model": MODEL})).status_code == 201
        before = stored.read_bytes()  # noqa: ASYNC240 - a small file
        filler = fill(small_disk)
        try:
            for method, path, body in (("PUT", "/rag/models/m", {"model": MODEL}),
                                       ("PUT", "/rag/models/kept", {"model": "qwen3:latest"}),
                                       ("DELETE", "/rag/models/kept", None)):
                reply = await client.request(method, path, json=body)
                assert reply.status_code in (503, 507), (method, path, reply.status_code, reply.text)
                message = reply.json()["error"]
                assert "space" in message.lower() and str(small_disk) not in message, message
            page = await post(client, "/admin/models", {"alias": "m", "model": MODEL, "kb": "default", "mode": "",
                                                        "system": "", "options": ""})
            assert page.status_code in (503, 507) and "space" in page.text.lower(), page.status_code
            assert await models_of(client) == {"kept:latest": MODEL}
            assert stored.read_bytes() == before  # noqa: ASYNC240
            leftovers = [p.name for p in stored.parent.iterdir() if p.name.startswith(".models")]  # noqa: ASYNC240
            assert leftovers == []   # no temporary file left behind either
        finally:
            os.unlink(filler)  # noqa: ASYNC240
        assert (await client.put("/rag/models/m", json={"model": MODEL})).status_code == 201


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
async def test_a_clients_own_non_finite_number_is_refused_and_never_sent_upstream(
        settings: Settings, fake: FakeOllama, number: bytes) -> None:
    """Not only a model's stored options: a chat's own options with NaN are not JSON (Ollama's
    decoder refuses them too); relayed or rewritten, they would reach the upstream as sent."""
    async with gateway_client(settings, fake) as client:
        assert (await client.put("/rag/models/ok-bot", json={"model": MODEL})).status_code == 201
        before = len(fake.requests)
        for path, fields in (("/api/chat", b'"messages": [{"role": "user", "content": "hi"}]'),
                             ("/api/generate", b'"prompt": "hi"'),
                             ("/api/embed", b'"input": "hi"'),
                             ("/v1/chat/completions", b'"messages": [{"role": "user", "content": "hi"}]')):
            for model in (b"ok-bot", b"llama3.2"):   # rewritten by a knowledge model, and relayed as sent
                body = b'{"model": "' + model + b'", "stream": false, ' + fields + \
                    b', "options": {"temperature": ' + number + b"}}"
                reply = await client.post(path, content=body, headers={"content-type": "application/json"})
                assert reply.status_code == 400, (path, model, reply.status_code, reply.text)
                what = "NaN" if number == b"NaN" else "an infinity"
                assert f"'options.temperature' is {what}" in reply.text, reply.text   # names where
        assert len(fake.requests) == before, [r.path for r in fake.requests[before:]]
