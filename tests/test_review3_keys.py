"""Keys mean what they say (issue 29, items 1, 2, 4 and the forwarded-address note of the third review).

1. A valid stored key is a credential for the body bounds (proxy/guards/body_limit.py), as the admin key
   is: a 12 KB chat, upload or MCP insert with an unrestricted stored admin key is not a 413.
2. Nothing of GraphGate's own reaches the upstream (proxy/gateway/headers.py): no stored key or admin key
   in Authorization, no X-GraphGate-* or X-Task header; a client's own Authorization, not GraphGate's,
   still reaches an upstream behind a proxy that wants it.
4. A console without GRAPHGATE_ADMIN_PASSWORD is open to loopback clients only while the API is open:
   once a key is in use (a stored key, or GRAPHGATE_API_KEY) it asks for an admin key (the admin key, or
   a stored admin key limited to no base), by header or through its login page, and says so.
+. ``graphgate serve`` does not believe X-Forwarded-For unless told which proxies to trust
   (GRAPHGATE_TRUSTED_PROXIES): a local client cannot rotate addresses past the login limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from proxy.control.keys import KEYS_FILE
from proxy.core.settings import Settings
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.corpus import PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.reliability_harness import Gateway, ScriptedUpstream

pytestmark = pytest.mark.anyio

ADMIN_KEY = "review3-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
BIG = "many words " * 1200   # 13.2 KB: over the 8 KiB an unauthenticated request may send
MODEL = "llama3.2:latest"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def csrf_header(client: httpx.AsyncClient) -> dict[str, str]:
    page = (await client.get("/admin/")).text
    return {"x-csrf-token": must_find(r'"X-CSRF-Token": "([^"]+)"', page).group(1)}


async def make_key(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/rag/keys", json=body, headers=headers)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def stored_names(settings: Settings) -> list[str]:
    path = settings.data_dir / KEYS_FILE
    return [key["name"] for key in json.loads(path.read_text())["keys"]] if path.exists() else []


# --- 1. a stored key carries a real body ---

def mcp_insert(name: str, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "insert", "arguments": {"name": name, "text": text}}}


MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def mcp_result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer, sent as JSON or as one server-sent event."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[len("data:"):] for line in text.splitlines() if line.startswith("data:"))
    answer: dict[str, Any] = json.loads(text)
    return answer


@pytest.mark.parametrize("guard", ["api_key", "password"])
async def test_a_stored_admin_key_sends_bodies_over_8_kib_everywhere(settings: Settings, fake: FakeOllama,
                                                                      guard: str) -> None:
    configured = settings.replace(api_key=ADMIN_KEY) if guard == "api_key" else \
        settings.replace(admin_password=PASSWORD)
    async with console_client(configured, fake) as client:
        if guard == "api_key":
            maker = ADMIN
        else:
            await log_in(client)
            maker = await csrf_header(client)
        key = bearer((await make_key(client, maker, name="owner", role="admin"))["token"])
        client.cookies.clear()   # from here on, the stored key only

        chat = await client.post("/api/chat", headers=key, json={
            "model": MODEL, "stream": False, "messages": [{"role": "user", "content": BIG}]})
        assert chat.status_code == 200, chat.text[:300]
        openai = await client.post("/v1/chat/completions", headers=key, json={
            "model": MODEL, "messages": [{"role": "user", "content": BIG}]})
        assert openai.status_code == 200, openai.text[:300]
        as_json = await client.post("/rag/documents", headers=key, json={"name": "big.txt", "text": BIG + "json"})
        assert as_json.status_code in (200, 202), as_json.text[:300]
        as_file = await client.post("/rag/documents", headers=key,
                                    files=[("files", ("big-file.txt", (BIG + "file").encode(), "text/plain"))])
        assert as_file.status_code in (200, 202), as_file.text[:300]
        assert [d["status"] for d in as_file.json()["documents"]] == ["pending"], as_file.text
        inserted = await client.post("/mcp", headers={**key, **MCP_HEADERS}, json=mcp_insert("mcp.txt", BIG + "mcp"))
        assert inserted.status_code == 200, inserted.text[:300]
        assert not mcp_result(inserted)["result"].get("isError"), inserted.text[:300]

        # the bound still holds for a token that is no key: refused, nothing inserted
        forged = await client.post("/mcp", headers={**bearer("gg_000000000000_" + "A" * 43), **MCP_HEADERS},
                                   json=mcp_insert("forged.txt", BIG))
        assert forged.status_code in (401, 413), forged.text[:300]
        names = {d["name"] for d in (await client.get("/rag/documents", headers=key)).json()["documents"]}
        assert names == {"big.txt", "big-file.txt", "mcp.txt"}


async def test_a_read_key_is_a_credential_for_the_bound_too(settings: Settings, fake: FakeOllama) -> None:
    """Any role: the role is the route's to check, after the bound."""
    async with console_client(settings.replace(api_key=ADMIN_KEY), fake) as client:
        reader = bearer((await make_key(client, ADMIN, name="reader", role="read"))["token"])
        chat = await client.post("/api/chat", headers=reader, json={
            "model": MODEL, "stream": False, "messages": [{"role": "user", "content": BIG}]})
        assert chat.status_code == 200, chat.text[:300]
        upload = await client.post("/rag/documents", headers=reader, json={"name": "big.txt", "text": BIG})
        assert upload.status_code == 403, upload.text[:300]   # the role speaks, not the bound


# --- 2. nothing of GraphGate's own reaches the upstream ---

OWN_HEADERS = {"x-graphgate-kb": "default", "x-graphgate-mode": "mix", "x-graphgate-cache": "off",
               "x-task": "title_generation"}


def leaked(fake: FakeOllama, path: str) -> dict[str, str]:
    """GraphGate's own headers the upstream received on its last ``path`` call."""
    calls = fake.requests_to(path)
    assert calls, f"nothing reached the upstream's {path}"
    return {name: value for name, value in calls[-1].headers.items()
            if name == "authorization" or name.startswith("x-graphgate-") or name in ("x-task", "x-csrf-token")}


async def upload_team(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post("/rag/documents", headers=headers, json={"name": "team.txt", "text": TEAM})
    document_id = response.json()["documents"][0]["id"]
    with anyio.fail_after(30):
        while (await client.get(f"/rag/documents/{document_id}", headers=headers)).json()["status"] != "processed":
            await anyio.sleep(0.02)


async def proxied_and_augmented_calls(client: httpx.AsyncClient, fake: FakeOllama, key: dict[str, str]) -> None:
    """/api/tags, /api/show, /api/embed and an augmented chat with ``key`` and GraphGate's own headers:
    none of them reaches the upstream."""
    sent = {**key, **OWN_HEADERS}
    assert (await client.get("/api/tags", headers=sent)).status_code == 200
    assert leaked(fake, "/api/tags") == {}
    assert (await client.post("/api/show", headers=sent, json={"model": MODEL})).status_code == 200
    assert leaked(fake, "/api/show") == {}
    embedded = await client.post("/api/embed", headers=sent, json={"model": "nomic-embed-text", "input": "hi"})
    assert embedded.status_code == 200
    assert leaked(fake, "/api/embed") == {}
    # a chat turn GraphGate augments (X-Task would make it a task turn, forwarded as it is: below)
    turn = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "What does Alice Smith lead?"}]}
    chat = await client.post("/api/chat", headers={**key, "x-graphgate-kb": "default", "x-graphgate-mode": "mix"},
                             json=turn)
    assert chat.status_code == 200, chat.text[:300]
    forwarded = fake.requests_to("/api/chat")[-1].json
    assert "Orion" in json.dumps(forwarded["messages"][:-1]), "the chat was not augmented"
    assert leaked(fake, "/api/chat") == {}
    task_turn = {k: v for k, v in turn.items() if k != "stream"}
    task = await client.post("/v1/chat/completions", headers=sent, json=task_turn)
    assert task.status_code == 200, task.text[:300]
    assert leaked(fake, "/v1/chat/completions") == {}


@pytest.mark.parametrize("admin_key", [False, True])
async def test_a_stored_key_and_graphgates_headers_never_reach_the_upstream(
        settings: Settings, fake: FakeOllama, admin_key: bool) -> None:
    fake.structured = KnownFacts(PEOPLE)
    configured = settings.replace(api_key=ADMIN_KEY) if admin_key else settings
    async with console_client(configured, fake) as client:
        maker = ADMIN if admin_key else {}
        key = bearer((await make_key(client, maker, name="owner", role="admin"))["token"])
        await upload_team(client, key)
        await proxied_and_augmented_calls(client, fake, key)
        if admin_key:
            await proxied_and_augmented_calls(client, fake, ADMIN)


async def test_a_clients_own_authorization_still_reaches_an_open_gateways_upstream(
        settings: Settings, fake: FakeOllama) -> None:
    """No key in use: a token that is not GraphGate's is the client's, for an upstream behind a proxy.
    A token of GraphGate's shape (a revoked key here) is GraphGate's, and stays here."""
    async with console_client(settings, fake) as client:
        own = {"authorization": "Bearer for-the-upstream"}
        assert (await client.get("/api/tags", headers={**own, **OWN_HEADERS})).status_code == 200
        assert leaked(fake, "/api/tags") == own
        made = await make_key(client, {}, name="gone", role="admin")
        assert (await client.delete(f"/rag/keys/{made['id']}", headers=bearer(made["token"]))).status_code == 200
        assert (await client.get("/api/tags", headers=bearer(made["token"]))).status_code == 200   # open again
        assert leaked(fake, "/api/tags") == {}


# --- 4. the password-less console is no open door once keys are in use ---

async def test_the_password_less_console_asks_for_an_admin_key_once_a_key_is_stored(
        settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings, fake) as client:   # loopback, no password
        open_page = await client.get("/admin/keys")
        assert open_page.status_code == 200   # the API is open: so is the console, on loopback
        admin = await make_key(client, {}, name="owner", role="admin")
        reader = await make_key(client, bearer(admin["token"]), name="reader", role="read")
        client.cookies.clear()

        # no key: the API answers 401, and so does the console now (its login page says why)
        assert (await client.get("/rag/documents")).status_code == 401
        keys_page = await client.get("/admin/keys")
        assert keys_page.status_code == 303 and keys_page.headers["location"].startswith("/admin/login")
        login_page = await client.get("/admin/login")
        assert login_page.status_code == 200
        assert "GRAPHGATE_ADMIN_PASSWORD" in login_page.text and "admin key" in login_page.text
        token = must_find(r'name="csrf" value="([^"]+)"', login_page.text).group(1)
        minted = await client.post("/admin/keys", data={"csrf": token, "name": "mine", "role": "admin"})
        assert minted.status_code in (303, 401) and "gg_" not in minted.text
        assert stored_names(settings) == ["owner", "reader"]

        assert "asks for an admin key" in open_page.text   # the open console said what a key does to it

        # by header: a stored admin key of every base opens it; a read key does not
        assert (await client.get("/admin/keys", headers=bearer(admin["token"]))).status_code == 200
        assert (await client.get("/admin/keys", headers=bearer(reader["token"]))).status_code == 303
        # through the login page: the read key is refused, the admin key logs in
        refused = await client.post("/admin/login", data={"csrf": token, "key": reader["token"]})
        assert refused.status_code == 401 and "admin key" in refused.text
        assert (await client.get("/admin/keys")).status_code == 303
        logged = await client.post("/admin/login", data={"csrf": token, "key": admin["token"], "next": "/admin/keys"})
        assert logged.status_code == 303 and logged.headers["location"] == "/admin/keys"
        listing = await client.get("/admin/keys")
        assert listing.status_code == 200 and "owner" in listing.text
        assert "asks for an admin key" in listing.text   # the banner says how this console is guarded
        # the login lasts as long as its key: revoked, the session is refused at once
        assert (await client.delete(f"/rag/keys/{admin['id']}", headers=bearer(admin["token"]))).status_code == 200
        assert (await client.get("/admin/keys")).status_code == 303


async def test_with_only_the_admin_key_set_the_console_needs_it_too(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings.replace(api_key=ADMIN_KEY), fake) as client:
        page = await client.get("/admin/")
        assert page.status_code == 303 and page.headers["location"].startswith("/admin/login")
        assert (await client.get("/admin/", headers=ADMIN)).status_code == 200
        token = must_find(r'name="csrf" value="([^"]+)"', (await client.get("/admin/login")).text).group(1)
        wrong = await client.post("/admin/login", data={"csrf": token, "key": ADMIN_KEY + "x"})
        assert wrong.status_code == 401
        logged = await client.post("/admin/login", data={"csrf": token, "key": ADMIN_KEY})
        assert logged.status_code == 303
        assert (await client.get("/admin/settings")).status_code == 200
        assert ADMIN_KEY not in (await client.get("/admin/settings")).text


async def test_the_open_console_still_answers_loopback_while_no_key_is_in_use(settings: Settings,
                                                                              fake: FakeOllama) -> None:
    async with console_client(settings, fake) as client:
        assert (await client.get("/admin/")).status_code == 200
    async with console_client(settings, fake, client_host="203.0.113.9") as client:
        assert (await client.get("/admin/")).status_code == 403


# --- the start-up log, and forwarded addresses (a real `graphgate serve`) ---

def bad_logins(url: str, addresses: list[str]) -> list[int]:
    """One wrong password per address, each claimed in X-Forwarded-For; the statuses."""
    with httpx.Client(base_url=url, timeout=30, headers=ADMIN) as client:
        page = client.get("/admin/login")
        token = must_find(r'name="csrf" value="([^"]+)"', page.text).group(1)
        return [client.post("/admin/login", data={"csrf": token, "password": "wrong"},
                            headers={"x-forwarded-for": address}).status_code for address in addresses]


ROTATED = [f"198.51.100.{n}" for n in range(1, 8)]   # more than the 5 a client may try in a minute


@pytest.mark.slow
def test_serve_ignores_x_forwarded_for_unless_a_proxy_is_trusted(tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    env = {"GRAPHGATE_API_KEY": ADMIN_KEY, "GRAPHGATE_ADMIN_PASSWORD": PASSWORD}
    with upstream.serve():
        with Gateway(tmp_path / "a", upstream.url, log_path=tmp_path / "a.log", env=env).start() as gateway:
            statuses = bad_logins(gateway.url, ROTATED)
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}, statuses   # one client: 127.0.0.1
        trusting = {**env, "GRAPHGATE_TRUSTED_PROXIES": "127.0.0.1"}
        with Gateway(tmp_path / "b", upstream.url, log_path=tmp_path / "b.log", env=trusting).start() as gateway:
            statuses = bad_logins(gateway.url, ROTATED)
        assert statuses == [401] * len(ROTATED), statuses   # opted in: each address is its own client


@pytest.mark.slow
def test_serve_says_how_the_password_less_console_is_guarded(tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    with upstream.serve():
        with Gateway(tmp_path / "data", upstream.url, log_path=tmp_path / "gateway.log").start():
            log = (tmp_path / "gateway.log").read_text()
    assert "GRAPHGATE_ADMIN_PASSWORD" in log and "asks for an admin key" in log, log
