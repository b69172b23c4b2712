"""Security review, as tests: who may change what, CSRF on every console action, secrets never
logged or shown, files only inside the data directory, the default bind and the warnings.

tests/test_console_auth.py covers the login itself (cookie flags, redirects, tampering, loopback mode)
and tests/test_api_key.py the key on the Ollama surface; this module enumerates routes from the app's
own route table, so a route added later is covered without editing the test.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.routing import Route

from proxy.app import Settings, create_app
from proxy.core.settings import SETTINGS
from tests.console_auth_helpers import PASSWORD, console_client, console_paths, log_in
from tests.console_helpers import csrf_of
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.rag_helpers import store_snapshot_of
from tests.reliability_harness import Gateway, ScriptedUpstream, document, wait_until

KEY = "sk-graphgate-SECRET-key-7f3a"
ADMIN = "pw-SECRET-admin-91c2"
READS = {"GET", "HEAD", "OPTIONS"}


def rag_writes(app) -> list[tuple[str, str]]:
    """(method, concrete path) of every /rag route that changes something (/rag/query only reads)."""
    out = []
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/rag/") and route.path != "/rag/query":
            if route.methods is None:
                raise AssertionError(f"{route.path} names no methods")
            path = re.sub(r"\{[^}]+\}", "x", route.path)
            out += [(m, path) for m in sorted(route.methods - READS)]
    return out


@pytest.mark.anyio
async def test_every_mutating_rag_route_needs_a_login_with_csrf_or_the_key(settings: Settings,
                                                                           fake: FakeOllama) -> None:
    app = create_app(settings.replace(admin_password=PASSWORD), upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        writes = rag_writes(app)
        assert len(writes) >= 8, writes
        kb = app.state.gateway.knowledge
        before = await store_snapshot_of(kb)
        for method, path in writes:
            response = await client.request(method, path, json={})
            assert response.status_code == 401, (method, path, response.status_code)
            assert "log in" in response.json()["error"]
        await log_in(client)
        for method, path in writes:  # a session alone is not enough: the cookie is ambient
            for headers in ({}, {"X-CSRF-Token": "forged"}):
                response = await client.request(method, path, json={}, headers=headers)
                assert response.status_code == 401, (method, path, headers)
        assert await store_snapshot_of(kb) == before
        token = csrf_of((await client.get("/admin/")).text)
        passed = await client.request("DELETE", "/rag/documents/doc-x", headers={"X-CSRF-Token": token})
        assert passed.status_code == 404  # through the gate: the document simply does not exist


@pytest.mark.anyio
async def test_every_console_action_needs_its_csrf_token(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings.replace(admin_password=PASSWORD), upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        await log_in(client)
        actions = [(m, p) for m, p in console_paths(app) if m not in READS]
        assert len(actions) >= 12, actions
        for method, path in actions:
            for data in ({}, {"csrf": "forged"}):
                response = await client.request(method, path, data=data)
                assert response.status_code == 403, (method, path, data, response.status_code)
                assert "CSRF" in response.text
        # the login form has its own token: a forged one is refused even with the right password
        await client.post("/admin/logout", data={"csrf": csrf_of((await client.get("/admin/")).text)})
        forged = await client.post("/admin/login", data={"csrf": "forged", "password": PASSWORD})
        assert forged.status_code == 403


def test_the_default_bind_is_loopback() -> None:
    defaults = Settings.load(environ={})
    assert defaults.host == "127.0.0.1"
    assert next(s for s in SETTINGS if s.name == "host").default == "127.0.0.1"


@pytest.mark.slow
@pytest.mark.parametrize("protected", [False, True])
def test_a_bind_beyond_loopback_warns_unless_protected(tmp_path: Path, protected: bool) -> None:
    upstream = ScriptedUpstream()
    env = {"GRAPHGATE_HOST": "0.0.0.0", "GRAPHGATE_LOG_LEVEL": "info"}
    if protected:
        env |= {"GRAPHGATE_API_KEY": KEY, "GRAPHGATE_ADMIN_PASSWORD": ADMIN}
    with upstream.serve():
        gateway = Gateway(tmp_path / "data", upstream.url, log_path=tmp_path / "gateway.log", env=env)
        with gateway.start():  # reached through 127.0.0.1 only
            log = gateway.log_path.read_text()
    warned = ("without GRAPHGATE_API_KEY" in log, "without GRAPHGATE_ADMIN_PASSWORD" in log)
    assert warned == ((False, False) if protected else (True, True)), log
    assert KEY not in log and ADMIN not in log


@pytest.mark.slow
def test_secrets_are_never_logged_or_shown_and_files_stay_in_the_data_directory(tmp_path: Path) -> None:
    home, work, temp = (tmp_path / n for n in ("home", "work", "tmp"))
    for folder in (home, work, temp):
        folder.mkdir()
    data = tmp_path / "data"
    upstream = ScriptedUpstream(reply_delay=0.01)
    env = {"GRAPHGATE_API_KEY": KEY, "GRAPHGATE_ADMIN_PASSWORD": ADMIN, "GRAPHGATE_LOG_LEVEL": "debug",
           "HOME": str(home), "TMPDIR": str(temp), "GRAPHGATE_INDEX_SAVE_SECONDS": "0.2"}
    shown: list[str] = []
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=tmp_path / "gateway.log", env=env, cwd=work).start()
        with gateway, httpx.Client(base_url=gateway.url, timeout=30) as client:
            key = {"Authorization": f"Bearer {KEY}"}
            wrong = {"Authorization": f"Bearer {KEY[:-1]}"}
            name, text = document(0)
            calls = [
                client.get("/api/tags", headers=wrong), client.get("/api/tags", headers=key),
                client.post("/api/chat", headers=key, json={"model": "llama3.2", "stream": False,
                                                            "messages": [{"role": "user", "content": "hi"}]}),
                client.post("/v1/chat/completions", headers=wrong, json={"model": "llama3.2", "messages": []}),
                client.post("/rag/documents", headers=key, json={"name": "../../../escape/" + name, "text": text}),
                client.post("/rag/documents", headers=key,
                            files=[("files", ("..%2F..%2Fout.txt", text.encode() + b" more", "text/plain")),
                                   ("files", ("/etc/cron.d/x.md", text.encode() + b" again", "text/plain"))]),
                client.get("/rag/stats", headers=key), client.get("/rag/documents", headers=wrong),
                client.get("/admin/settings", headers=key), client.get("/admin/", headers=key),
            ]
            login_page = client.get("/admin/login")
            token = must_find(r'name="csrf" value="([^"]+)"', login_page.text).group(1)
            calls.append(client.post("/admin/login", data={"csrf": token, "password": ADMIN + "x"}))
            calls.append(client.post("/admin/login", data={"csrf": token, "password": ADMIN}))
            calls.append(client.get("/admin/settings"))
            shown = [r.text + "\n".join(f"{k}: {v}" for k, v in r.headers.items()) for r in [*calls, login_page]]
            ids = {d["id"] for d in client.get("/rag/documents", headers=key).json()["documents"]}
            assert len(ids) == 3
            wait_until(lambda: all(d["status"] == "processed" for d in
                                   client.get("/rag/documents", headers=key).json()["documents"]), 60, "ingestion")
            settings_page = client.get("/admin/settings").text
            assert "GRAPHGATE_API_KEY" in settings_page and "GRAPHGATE_ADMIN_PASSWORD" in settings_page
            gateway.terminate()
    log = gateway.log_path.read_text()
    assert "DEBUG" in log  # the most talkative level was on
    for secret in (KEY, ADMIN, KEY[:-1]):
        assert secret not in log, f"a secret is in the log: {secret[:6]}..."
        assert not any(secret in text for text in shown), f"a secret was shown: {secret[:6]}..."
    # nothing written outside the data directory: not the working directory, HOME or TMPDIR, and no
    # traversal target beside or above it
    assert not any(work.iterdir()) and not any(temp.iterdir()), (list(work.iterdir()), list(temp.iterdir()))
    assert not [p for p in home.rglob("*") if p.is_file()]
    assert not (tmp_path / "escape").exists() and not (tmp_path / "out.txt").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"home", "work", "tmp", "data", "gateway.log"}
    written = {p.relative_to(data).parts[0] for p in data.rglob("*")}
    assert "graphgate.duckdb" in written and all(not part.startswith("..") for part in written)
