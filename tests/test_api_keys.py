"""API keys with scopes (issue 20, part 3: proxy/control/keys.py, proxy/guards/access.py): keys made
and revoked at run time through /rag/keys, stored hashed, each limited to some knowledge bases and a
role. Two bases with overlapping entity names (``hr`` and ``eng``, Alice Smith in both): a key
limited to hr never sees eng, not even its name; GRAPHGATE_API_KEY stays the unrestricted admin; a
revoked key stops at once; bad input is a 400 that stores nothing; MCP tools check the same way."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from proxy.app import create_app
from proxy.control.keys import KEYS_FILE
from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.console_auth_helpers import PASSWORD, log_in
from tests.corpus import CLUB, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.mcp_helpers import error_text, http_session, resource_json, structured, wait_processed
from tests.servers import silent_port
from tests.test_cli_metadata import graphgate

pytestmark = pytest.mark.anyio

ADMIN_KEY = "the-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def with_admin_key(settings: Settings, **extra: Any) -> Settings:
    return settings.replace(api_key=ADMIN_KEY, **extra)


async def upload(client: httpx.AsyncClient, kb: str, name: str, text: str, headers: dict[str, str]) -> str:
    response = await client.post("/rag/documents", params={"kb": kb}, json={"name": name, "text": text},
                                 headers=headers)
    assert response.status_code in (200, 202), response.text
    document_id: str = response.json()["documents"][0]["id"]
    with anyio.fail_after(20):
        while (await client.get(f"/rag/documents/{document_id}", params={"kb": kb},
                                headers=headers)).json()["status"] != "processed":
            await anyio.sleep(0.02)
    return document_id


async def make_key(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/rag/keys", json=body, headers=headers)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


async def two_bases(client: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, str]:
    """hr holds the team (Alice Smith leads Orion), eng the chess club (Alice Smith again)."""
    for name in ("hr", "eng"):
        assert (await client.post("/rag/kbs", json={"name": name}, headers=headers)).status_code == 201
    return {"hr": await upload(client, "hr", "team.txt", TEAM, headers),
            "eng": await upload(client, "eng", "club.txt", CLUB, headers)}


def unknown_message(kb: str) -> str:
    return f"no knowledge base named {kb!r}"


async def test_a_key_limited_to_hr_reads_hr_and_never_sees_eng(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(with_admin_key(settings), fake) as client:
        ids = await two_bases(client, ADMIN)
        reader = bearer((await make_key(client, ADMIN, name="hr reader", role="read", kbs=["hr"]))["token"])

        # hr: everything a reader may read
        documents = (await client.get("/rag/documents", params={"kb": "hr"}, headers=reader)).json()["documents"]
        assert [d["name"] for d in documents] == ["team.txt"]
        answer = await client.post("/rag/query", params={"kb": "hr"}, json={"query": "What does Alice Smith do?"},
                                   headers=reader)
        assert answer.status_code == 200, answer.text
        assert "Orion" in answer.text and "chess" not in answer.text
        entity = await client.get("/rag/entities/Alice Smith", headers={**reader, "X-GraphGate-KB": "hr"})
        assert entity.status_code == 200 and "Orion" in entity.text
        assert (await client.get("/rag/traces", params={"kb": "hr"}, headers=reader)).status_code == 200

        # eng (and default): answered exactly as a base that does not exist
        calls = [("GET", "/rag/documents", None), ("GET", f"/rag/documents/{ids['eng']}", None),
                 ("POST", "/rag/query", {"query": "What does Alice Smith do?"}), ("GET", "/rag/traces", None),
                 ("GET", "/rag/entities/Alice Smith", None), ("GET", "/rag/stats", None),
                 ("GET", "/rag/pipeline", None)]
        for method, path, body in calls:
            for kb in ("eng", "default", "nope"):
                response = await client.request(method, path, params={"kb": kb}, json=body, headers=reader)
                assert response.status_code == 404, (method, path, kb, response.text)
                assert response.json() == {"error": unknown_message(kb)}, (method, path, kb)
            by_header = await client.request(method, path, json=body, headers={**reader, "X-GraphGate-KB": "eng"})
            assert by_header.status_code == 404 and "chess" not in by_header.text
        # the list of bases names hr only; eng cannot be deleted (nor learnt of)
        listed = (await client.get("/rag/kbs", headers=reader)).json()["kbs"]
        assert [b["name"] for b in listed] == ["hr"]
        gone = await client.delete("/rag/kbs/eng", params={"confirm": "eng"}, headers=reader)
        assert gone.status_code == 404 and gone.json() == {"error": unknown_message("eng")}

        # writing to hr: 403, and nothing changes
        refused = [await client.post("/rag/documents", params={"kb": "hr"}, json={"name": "x.txt", "text": "x"},
                                     headers=reader),
                   await client.delete(f"/rag/documents/{ids['hr']}", params={"kb": "hr"}, headers=reader),
                   await client.patch("/rag/entities/Alice Smith", params={"kb": "hr"},
                                      json={"description": "changed"}, headers=reader),
                   await client.delete("/rag/kbs/hr", params={"confirm": "hr"}, headers=reader)]
        for response in refused:
            assert response.status_code == 403, response.text
            assert "hr reader" in response.json()["error"]
        documents = (await client.get("/rag/documents", params={"kb": "hr"}, headers=ADMIN)).json()["documents"]
        assert [d["name"] for d in documents] == ["team.txt"]
        assert "changed" not in (await client.get("/rag/entities/Alice Smith", params={"kb": "hr"},
                                                  headers=ADMIN)).text

        # keys and new bases are an unrestricted admin's
        assert (await client.get("/rag/keys", headers=reader)).status_code == 403
        assert (await client.post("/rag/kbs", json={"name": "more"}, headers=reader)).status_code == 403
        # the Ollama API: any valid key reads; managing the upstream's models is refused, Ollama-shaped
        assert (await client.get("/api/tags", headers=reader)).status_code == 200
        assert (await client.get("/api/version", headers=reader)).status_code == 200
        pull = await client.post("/api/pull", json={"model": "llama3"}, headers=reader)
        assert pull.status_code == 403 and set(pull.json()) == {"error"}
        assert (await client.get("/api/tags")).status_code == 401
        # the unrestricted admin sees both bases, and the health check stays public
        listed = (await client.get("/rag/kbs", headers=ADMIN)).json()["kbs"]
        assert [b["name"] for b in listed] == ["default", "eng", "hr"]
        assert (await client.get("/rag/health")).status_code == 200


async def test_write_and_admin_keys_limited_to_hr(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(with_admin_key(settings, metrics_require_key=True), fake) as client:
        await two_bases(client, ADMIN)
        writer = bearer((await make_key(client, ADMIN, name="hr writer", role="write", kbs=["hr"]))["token"])
        hr_admin = bearer((await make_key(client, ADMIN, name="hr admin", role="admin", kbs=["hr"]))["token"])

        await upload(client, "hr", "more.txt", "Bob Jones leads the Orion project now.", writer)
        on_eng = await client.post("/rag/documents", params={"kb": "eng"}, json={"name": "x.txt", "text": "x"},
                                   headers=writer)
        assert on_eng.status_code == 404 and on_eng.json() == {"error": unknown_message("eng")}
        assert (await client.delete("/rag/kbs/hr", params={"confirm": "hr"}, headers=writer)).status_code == 403

        # an admin of hr only: no keys, no new bases, no model management, no metrics; eng stays unknown
        assert (await client.post("/rag/keys", json={"name": "mine", "role": "read"}, headers=hr_admin)).status_code \
            == 403
        assert (await client.get("/rag/keys", headers=hr_admin)).status_code == 403
        assert (await client.post("/rag/kbs", json={"name": "sales"}, headers=hr_admin)).status_code == 403
        assert (await client.post("/api/delete", json={"model": "m"}, headers=hr_admin)).status_code == 403
        assert (await client.get("/metrics", headers=hr_admin)).status_code == 403
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics", headers=ADMIN)).status_code == 200
        assert (await client.delete("/rag/kbs/eng", params={"confirm": "eng"}, headers=hr_admin)).status_code == 404
        assert [b["name"] for b in (await client.get("/rag/kbs", headers=ADMIN)).json()["kbs"]] == \
            ["default", "eng", "hr"]
        # ... but it may delete its own base
        deleted = await client.delete("/rag/kbs/hr", params={"confirm": "hr"}, headers=hr_admin)
        assert deleted.status_code == 200, deleted.text
        assert [b["name"] for b in (await client.get("/rag/kbs", headers=ADMIN)).json()["kbs"]] == ["default", "eng"]


async def test_the_admin_key_keeps_working_and_a_revoked_key_stops_at_once(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(with_admin_key(settings), fake) as client:
        assert (await client.get("/rag/stats")).status_code == 401
        assert (await client.get("/rag/stats", headers=bearer("wrong"))).status_code == 401
        assert (await client.get("/api/tags", headers=ADMIN)).status_code == 200
        made = await make_key(client, ADMIN, name="laptop", role="read", kbs=None)
        other = await make_key(client, ADMIN, name="ci", role="write", kbs=["default"])
        token = made["token"]
        assert token.startswith(f"gg_{made['id']}_") and made["prefix"] == token[:len(made["prefix"])]
        assert made["kbs"] is None and other["kbs"] == ["default"]
        assert (await client.get("/rag/stats", headers=bearer(token))).status_code == 200
        assert (await client.get("/rag/stats", headers=bearer(token[:-1] + ("A" if token[-1] != "A" else "B")))
                ).status_code == 401

        listed = (await client.get("/rag/keys", headers=ADMIN)).json()["keys"]
        assert [k["name"] for k in listed] == ["laptop", "ci"]
        assert all("token" not in k and "sha256" not in k for k in listed)
        stored = (settings.data_dir / KEYS_FILE).read_text()
        assert token not in stored and other["token"] not in stored
        assert token.rsplit("_", 1)[1] not in stored   # not even the secret part
        assert stat.S_IMODE(os.stat(settings.data_dir / KEYS_FILE).st_mode) == 0o600

        revoked = await client.delete(f"/rag/keys/{made['id']}", headers=ADMIN)
        assert revoked.status_code == 200 and revoked.json() == {"revoked": made["id"], "name": "laptop"}
        assert (await client.get("/rag/stats", headers=bearer(token))).status_code == 401
        assert (await client.delete(f"/rag/keys/{made['id']}", headers=ADMIN)).status_code == 404
        assert (await client.get("/rag/stats", headers=bearer(other["token"]))).status_code == 200
    # after a restart: the revocation holds, the other key still works
    async with gateway_client(with_admin_key(settings), fake) as client:
        assert (await client.get("/rag/stats", headers=bearer(token))).status_code == 401
        assert (await client.get("/rag/stats", headers=bearer(other["token"]))).status_code == 200
        assert [k["id"] for k in (await client.get("/rag/keys", headers=ADMIN)).json()["keys"]] == [other["id"]]


async def test_bad_input_is_a_400_and_stores_nothing(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(with_admin_key(settings), fake) as client:
        assert (await client.post("/rag/kbs", json={"name": "hr"}, headers=ADMIN)).status_code == 201
        bad = [({"name": "k", "role": "owner"}, "role"),
               ({"name": "k", "role": "read", "kbs": ["eng"]}, "'eng'"),
               ({"name": "k", "role": "read", "kbs": ["hr", "Bad Name"]}, "'Bad Name'"),
               ({"name": "k", "role": "read", "kbs": []}, "kbs"),
               ({"name": "k", "role": "read", "kbs": "hr"}, "kbs"),
               ({"name": "", "role": "read"}, "name"),
               ({"name": "x" * 65, "role": "read"}, "name"),
               ({"name": " padded", "role": "read"}, "name"),
               ({"name": 7, "role": "read"}, "name"),
               ({"role": "read"}, "name"),
               ({"name": "k", "role": "read", "secret": "mine"}, "'secret'")]
        for body, named in bad:
            response = await client.post("/rag/keys", json=body, headers=ADMIN)
            assert response.status_code == 400, (body, response.text)
            assert named in response.json()["error"], (body, response.json())
        assert (await client.post("/rag/keys", content=b"[1]", headers=ADMIN)).status_code == 400
        assert (await client.get("/rag/keys", headers=ADMIN)).json() == {"keys": []}
        assert not (settings.data_dir / KEYS_FILE).exists()
        # a good one after all of them is the only key
        made = await make_key(client, ADMIN, name="k", role="read", kbs=["hr", "hr"])
        assert made["kbs"] == ["hr"]
        assert len(json.loads((settings.data_dir / KEYS_FILE).read_text())["keys"]) == 1


async def test_the_first_stored_key_closes_an_open_gateway_and_the_last_revocation_opens_it(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:   # no GRAPHGATE_API_KEY: open, as before
        assert (await client.get("/rag/stats")).status_code == 200
        assert (await client.get("/api/tags")).status_code == 200
        admin = await make_key(client, {}, name="owner", role="admin", kbs=None)
        for path in ("/rag/stats", "/api/tags", "/v1/models", "/rag/keys"):
            response = await client.get(path)
            assert response.status_code == 401 and "API key" in response.text, path
        assert (await client.get("/rag/health")).status_code == 200
        token = bearer(admin["token"])
        assert (await client.get("/rag/stats", headers=token)).status_code == 200
        assert (await client.post("/api/pull", json={"model": "m", "stream": False}, headers=token)).status_code \
            != 403   # an unrestricted stored admin may manage models
        assert (await client.delete(f"/rag/keys/{admin['id']}", headers=token)).status_code == 200
        assert (await client.get("/rag/stats")).status_code == 200   # no key left: open again


@pytest.mark.parametrize("content", ['{"keys": [', '{"keys": 5}', '[]', '{"keys": [{"id": "x", "role": "root"}]}'])
async def test_an_unreadable_key_file_keeps_the_api_closed(settings: Settings, fake: FakeOllama, content: str) -> None:
    settings.data_dir.mkdir(parents=True)
    (settings.data_dir / KEYS_FILE).write_text(content)
    async with gateway_client(settings, fake) as client:
        assert (await client.get("/rag/stats")).status_code == 401
        assert (await client.get("/api/tags")).status_code == 401
    async with gateway_client(with_admin_key(settings), fake) as client:
        assert (await client.get("/rag/stats", headers=ADMIN)).status_code == 200
        refused = await client.post("/rag/keys", json={"name": "k", "role": "read"}, headers=ADMIN)
        assert refused.status_code == 503 and KEYS_FILE in refused.json()["error"]
    assert (settings.data_dir / KEYS_FILE).read_text() == content   # left as it was, for its owner


async def test_a_console_login_is_the_admin_on_rag_beside_stored_keys(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings.replace(admin_password=PASSWORD), fake) as client:
        assert (await log_in(client)).status_code in (200, 303)
        made = await make_key(client, {"x-csrf-token": await csrf_of(client)}, name="r", role="read", kbs=["default"])
        assert (await client.get("/rag/kbs")).status_code == 200   # the login: the admin
        assert [b["name"] for b in (await client.get("/rag/kbs", headers=bearer(made["token"]))).json()["kbs"]] == \
            ["default"]
        assert (await client.get("/rag/keys", headers=bearer(made["token"]))).status_code == 403


async def csrf_of(client: httpx.AsyncClient) -> str:
    page = (await client.get("/admin/")).text
    start = page.index('"X-CSRF-Token": "') + len('"X-CSRF-Token": "')
    return page[start:page.index('"', start)]


# --- MCP over a real uvicorn gateway ---

@pytest.fixture(scope="module")
def mcp_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    data_dir = tmp_path_factory.mktemp("keys-mcp") / "data"
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_KEYWORD_BUDGET": "30",
                                      "GRAPHGATE_API_KEY": ADMIN_KEY})
    with fake.serve() as upstream, serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        ids = {}
        for kb, name, text in (("hr", "team.txt", TEAM), ("eng", "club.txt", CLUB), ("default", "team.txt", TEAM)):
            if kb != "default":
                assert httpx.post(f"{url}/rag/kbs", json={"name": kb}, headers=ADMIN).status_code == 201
            response = httpx.post(f"{url}/rag/documents", params={"kb": kb}, json={"name": name, "text": text},
                                  headers={**ADMIN, "x-graphgate-kb": kb})
            ids[kb] = response.json()["documents"][0]["id"]
            wait_processed(url, [ids[kb]], {**ADMIN, "x-graphgate-kb": kb})
        reader = httpx.post(f"{url}/rag/keys", json={"name": "hr reader", "role": "read", "kbs": ["hr"]},
                            headers=ADMIN).json()["token"]
        yield {"url": url, "reader": reader, "ids": ids}


async def test_mcp_tools_with_a_key_limited_to_hr(mcp_world: dict[str, Any]) -> None:
    url = mcp_world["url"]
    async with http_session(url, mcp_world["reader"]) as client:
        found = structured(await client.call_tool("query", {"question": "What does Alice Smith do?", "kb": "hr"}))
        assert "Orion" in found["context"] and "chess" not in found["context"]
        assert structured(await client.call_tool("stats", {"kb": "hr"}))["documents"]["processed"] == 1
        assert structured(await client.call_tool("get_relations", {"entity": "Alice Smith", "kb": "hr"}))

        for kb in ("eng", "default"):
            for tool, arguments in (("query", {"question": "Alice Smith?"}), ("stats", {}),
                                    ("get_entities", {"query": "Alice"}),
                                    ("get_relations", {"entity": "Alice Smith"})):
                hidden = error_text(await client.call_tool(tool, {**arguments, "kb": kb}))
                unknown = error_text(await client.call_tool(tool, {**arguments, "kb": "nope"}))
                assert hidden == unknown.replace("'nope'", repr(kb)), (tool, kb, hidden, unknown)
                assert "chess" not in hidden
        refused = error_text(await client.call_tool("insert", {"name": "x.txt", "text": "x", "kb": "hr"}))
        assert "forbidden" in refused and "hr reader" in refused
        assert "forbidden" in error_text(await client.call_tool("delete", {"document_id": mcp_world["ids"]["hr"],
                                                                           "kb": "hr"}))
        assert "forbidden" in error_text(await client.call_tool("rebuild_index", {}))
        with pytest.raises(MCPError, match="no knowledge base named 'default'"):
            await client.read_resource("graphgate://entities/Alice%20Smith")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=url, headers={"accept": "application/json, text/event-stream"}) as http:
        for token in (mcp_world["reader"] + "x", "gg_000000000000_" + "A" * 43):
            response = await http.post("/mcp", json=ping, headers=bearer(token))
            assert response.status_code == 401, response.text


async def test_mcp_with_the_admin_key_reaches_every_base(mcp_world: dict[str, Any]) -> None:
    async with http_session(mcp_world["url"], ADMIN_KEY) as client:
        found = structured(await client.call_tool("query", {"question": "What does Alice Smith do?", "kb": "eng"}))
        assert "chess" in found["context"] and "Orion" not in found["context"]
        assert structured(await client.call_tool("stats", {"kb": "hr"}))["documents"]["processed"] == 1
        entity = resource_json((await client.read_resource("graphgate://entities/Alice%20Smith")).contents)
        assert entity["name"] == "Alice Smith"   # the resources read the default base


# --- the command line ---

def test_cli_keys_through_a_gateway(settings: Settings, fake: FakeOllama, capsys: pytest.CaptureFixture[str]) -> None:
    with fake.serve() as upstream, serve_in_thread(create_app(with_admin_key(settings, upstream=upstream))) as url:
        assert httpx.post(f"{url}/rag/kbs", json={"name": "hr"}, headers=ADMIN).status_code == 201
        flags = ["--port", str(urlsplit(url).port), "--api-key", ADMIN_KEY]
        status, token, err = graphgate(capsys, "keys", "create", "--name", "hr bot", "--role", "read",
                                       "--kb", "hr", *flags)
        assert status == 0 and "not shown again" in err and "using the gateway" in err, err
        token = token.strip()
        assert httpx.get(f"{url}/rag/kbs", headers=bearer(token)).json()["kbs"][0]["name"] == "hr"
        status, out, err = graphgate(capsys, "keys", "list", *flags)
        assert status == 0 and "hr bot" in out and "read" in out and token not in out, (out, err)
        key_id = token.split("_")[1]
        status, _, err = graphgate(capsys, "keys", "create", "--name", "x", "--role", "read", "--kb", "eng", *flags)
        assert status == 1 and "no knowledge base named 'eng'" in err, err
        status, _, err = graphgate(capsys, "keys", "list", "--port", str(urlsplit(url).port))   # no admin key
        assert status == 1 and "GRAPHGATE_API_KEY" in err, err
        status, _, err = graphgate(capsys, "keys", "revoke", key_id, *flags)
        assert status == 0 and f"revoked key {key_id}" in err, err
        assert httpx.get(f"{url}/rag/kbs", headers=bearer(token)).status_code == 401   # at once
        status, _, err = graphgate(capsys, "keys", "revoke", key_id, *flags)
        assert status == 1 and "no API key" in err, err


def test_cli_keys_on_the_data_directory(settings: Settings, fake: FakeOllama, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    async def make_store() -> None:
        async with gateway_client(settings, fake) as client:
            assert (await client.post("/rag/kbs", json={"name": "hr"})).status_code == 201

    anyio.run(make_store)   # a store with a base hr; no gateway runs now
    flags = ["--data-dir", str(settings.data_dir), "--port", str(silent_port())]
    status, token, err = graphgate(capsys, "keys", "create", "--name", "offline", "--role", "write", "--kb", "hr",
                                   *flags)
    assert status == 0 and "directly" in err and "not shown again" in err, err
    token = token.strip()
    stored = (settings.data_dir / KEYS_FILE).read_text()
    assert token not in stored and "offline" in stored
    status, _, err = graphgate(capsys, "keys", "create", "--name", "x", "--role", "read", "--kb", "eng", *flags)
    assert status == 1 and "no knowledge base named 'eng'" in err, err
    status, out, _ = graphgate(capsys, "keys", "list", *flags)
    assert status == 0 and out.count("\n") == 1 and "offline" in out and "write" in out and " hr " in out

    async def use_it() -> None:   # a gateway started now takes the key
        async with gateway_client(settings, fake) as client:
            assert (await client.get("/rag/stats", params={"kb": "hr"})).status_code == 401
            assert (await client.get("/rag/stats", params={"kb": "hr"}, headers=bearer(token))).status_code == 200

    anyio.run(use_it)
    status, _, err = graphgate(capsys, "keys", "revoke", token.split("_")[1], *flags)
    assert status == 0, err
    assert json.loads((settings.data_dir / KEYS_FILE).read_text())["keys"] == []
    status, _, err = graphgate(capsys, "keys", "create", "--name", "x", "--role", "read",
                               "--data-dir", str(tmp_path / "elsewhere"), "--port", str(silent_port()))
    assert status == 1 and "no knowledge store" in err, err
    assert not (tmp_path / "elsewhere").exists()


async def test_a_deleted_base_is_taken_out_of_its_keys(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(with_admin_key(settings), fake) as client:
        for name in ("hr", "eng"):
            assert (await client.post("/rag/kbs", json={"name": name}, headers=ADMIN)).status_code == 201
        both = await make_key(client, ADMIN, name="both", role="read", kbs=["hr", "eng"])
        reader = bearer(both["token"])
        assert (await client.delete("/rag/kbs/hr", params={"confirm": "hr"}, headers=ADMIN)).status_code == 200
        listed = {k["id"]: k for k in (await client.get("/rag/keys", headers=ADMIN)).json()["keys"]}
        assert listed[both["id"]]["kbs"] == ["eng"]
        # a new base under the old name is not the key's
        assert (await client.post("/rag/kbs", json={"name": "hr"}, headers=ADMIN)).status_code == 201
        assert (await client.get("/rag/documents", params={"kb": "hr"}, headers=reader)).status_code == 404
        assert (await client.get("/rag/documents", params={"kb": "eng"}, headers=reader)).status_code == 200


async def test_the_public_health_check_does_not_tell_other_bases_apart(
        settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(with_admin_key(settings), fake) as client:
        for name in ("hr", "eng"):
            assert (await client.post("/rag/kbs", json={"name": name}, headers=ADMIN)).status_code == 201
        reader = bearer((await make_key(client, ADMIN, name="hr", role="read", kbs=["hr"]))["token"])
        assert (await client.get("/rag/health")).status_code == 200   # default's: public, as before
        anonymous = await client.get("/rag/health", params={"kb": "hr"})
        unknown = await client.get("/rag/health", params={"kb": "nowhere"})
        assert anonymous.status_code == unknown.status_code == 404
        assert anonymous.json()["error"] == "no knowledge base named 'hr'"
        assert (await client.get("/rag/health", params={"kb": "hr"}, headers=reader)).json()["kb"] == "hr"
        assert (await client.get("/rag/health", params={"kb": "eng"}, headers=reader)).status_code == 404
        assert (await client.get("/rag/health", params={"kb": "eng"}, headers=ADMIN)).json()["kb"] == "eng"
