"""DNS rebinding (issue 16, item 2): on a loopback bind every request must name the gateway by an
allowed host (an IP literal, localhost or a GRAPHGATE_ALLOWED_HOSTS name), on every route, or it
gets 403 and changes nothing; a password-less console on any bind needs an allowed Host too."""

from __future__ import annotations

import httpx
import pytest

from proxy.app import Settings, create_app
from proxy.core.hosts import host_name, local_url
from proxy.core.settings import SettingsError
from tests.console_auth_helpers import console_client
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import store_snapshot_of

EVIL = {"Host": "rebind.attacker.example:11435", "Origin": "http://rebind.attacker.example:11435"}


@pytest.mark.parametrize(("raw", "name"), [
    ("localhost:11435", "localhost"), ("[::1]:8080", "::1"), ("127.0.0.1", "127.0.0.1"), ("LocalHost.", "localhost"),
    ("Gateway.LAN:80", "gateway.lan"), ("::1", "::1"), ("evil.example:", "evil.example"),
])
def test_host_name(raw: str, name: str) -> None:
    assert host_name(raw) == name


def test_allowed_hosts_setting() -> None:
    base = {"GRAPHGATE_DATA_DIR": "/tmp/x"}
    loaded = Settings.load(environ={**base, "GRAPHGATE_ALLOWED_HOSTS": " Gateway.LAN:8080, *.corp.example ,"})
    assert loaded.allowed_hosts == ("gateway.lan", "*.corp.example")
    with pytest.raises(SettingsError, match="GRAPHGATE_ALLOWED_HOSTS"):
        Settings.load(environ={**base, "GRAPHGATE_ALLOWED_HOSTS": "http://gateway.lan/"})


@pytest.mark.anyio
async def test_a_rebound_name_reaches_nothing_on_a_loopback_bind(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings, upstream_transport=fake.transport())  # no key, no password, 127.0.0.1
    async with console_client(settings, fake, app=app) as client:
        kb = app.state.gateway.knowledge
        before = await store_snapshot_of(kb)
        models = set(fake.models)
        console = await client.get("/admin/", headers=EVIL)
        assert console.status_code == 403
        assert "X-CSRF-Token" not in console.text and "GRAPHGATE_ALLOWED_HOSTS" in console.text
        for method, path, body in [
            ("POST", "/rag/documents", {"name": "x.txt", "text": "Ada Lovelace wrote notes."}),
            ("GET", "/rag/traces", None), ("GET", "/rag/documents", None), ("GET", "/rag/health", None),
            ("POST", "/rag/query", {"query": "who?"}), ("GET", "/api/tags", None),
            ("DELETE", "/api/delete", {"model": next(iter(models))}), ("POST", "/admin/documents/doc-x/delete", None),
            ("OPTIONS", "/api/chat", None),
        ]:
            headers = {**EVIL, "Access-Control-Request-Method": "POST"} if method == "OPTIONS" else EVIL
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code == 403, (method, path, response.status_code)
            if not path.startswith("/admin/"):
                assert "is not allowed" in response.json()["error"]
        assert set(fake.models) == models
        assert await store_snapshot_of(kb) == before
        # the names of this machine pass, with any port
        for host in ("localhost:11435", "127.0.0.1:9", "[::1]:11435", "localhost", "app.localhost:3000"):
            response = await client.get("/admin/", headers={"Host": host})
            assert response.status_code == 200, host
            assert (await client.get("/rag/documents", headers={"Host": host})).status_code == 200, host


@pytest.mark.anyio
async def test_allowed_hosts_adds_names(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings.replace(allowed_hosts=("gateway.lan", "*.corp.example")),
                     upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        for host, status in (("gateway.lan:11435", 200), ("a.corp.example", 200), ("corp.example", 403),
                             ("gateway.lan.evil.example", 403), ("localhost:1", 200)):
            assert (await client.get("/api/tags", headers={"Host": host})).status_code == status, host


@pytest.mark.anyio
async def test_a_non_loopback_bind_keeps_the_console_for_allowed_names(settings: Settings,
                                                                        fake: FakeOllama) -> None:
    """0.0.0.0 without the setting: the API answers any name (as Ollama's does: the network reaches it
    anyway), but what only loopback is granted, the password-less console, needs an allowed Host."""
    app = create_app(settings.replace(host="0.0.0.0"), upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        assert (await client.get("/api/tags", headers={"Host": "gateway.example:11435"})).status_code == 200
        assert (await client.get("/admin/", headers=EVIL)).status_code == 403
        assert (await client.get("/admin/", headers={"Host": "127.0.0.1:11435"})).status_code == 200


def test_a_real_socket_refuses_a_rebound_name(live_gateway: str) -> None:
    with httpx.Client(base_url=live_gateway, timeout=10) as client:
        refused = client.get("/admin/", headers=EVIL)
        assert refused.status_code == 403 and "X-CSRF-Token" not in refused.text
        assert client.get("/api/tags", headers=EVIL).status_code == 403
        assert client.get("/api/tags").status_code == 200


def test_a_local_client_reaches_the_gateway_at_its_bind_address() -> None:
    assert local_url("0.0.0.0", 11435) == local_url("::", 11435) == "http://127.0.0.1:11435"
    assert local_url("::1", 8080) == "http://[::1]:8080"
    assert local_url("[::1]", 8080) == "http://[::1]:8080"
    assert local_url("localhost", 1) == "http://localhost:1"
