"""The optional API key guards /api/* and /v1/*; / stays open for heartbeats."""

from __future__ import annotations

import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.anyio

KEY = "correct horse battery staple"


@pytest.fixture
async def keyed(settings: Settings, fake: FakeOllama):
    async with gateway_client(settings.replace(api_key=KEY), fake) as client:
        yield client


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/tags"), ("GET", "/api/version"), ("POST", "/api/chat"),
                                              ("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                                              ("DELETE", "/api/delete"), ("HEAD", "/api/blobs/sha256:00")])
@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {KEY}", KEY])
async def test_requests_without_the_key_are_refused(keyed: httpx.AsyncClient, fake: FakeOllama,
                                                    method: str, path: str, auth: str | None) -> None:
    headers = {"authorization": auth} if auth else {}
    response = await keyed.request(method, path, headers=headers, json={"model": "llama3.2"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    if method != "HEAD":
        body = response.json()
        message = body["error"]["message"] if path.startswith("/v1/") else body["error"]
        assert "API key" in message
    assert fake.requests == []


async def test_root_stays_open(keyed: httpx.AsyncClient) -> None:
    assert (await keyed.head("/")).status_code == 200
    assert (await keyed.get("/")).text == "Ollama is running"


async def test_the_key_lets_requests_through_and_is_not_forwarded(keyed: httpx.AsyncClient,
                                                                  fake: FakeOllama) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    assert (await keyed.get("/api/tags", headers=headers)).status_code == 200
    response = await keyed.post("/api/chat", headers=headers, json={
        "model": "llama3.2:latest", "messages": [{"role": "user", "content": "hi"}], "stream": False})
    assert response.status_code == 200
    assert "authorization" not in fake.requests_to("/api/chat")[-1].headers


async def test_without_a_key_authorization_reaches_the_upstream(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    await client.get("/api/tags", headers={"authorization": "Bearer for-the-upstream"})
    assert fake.requests_to("/api/tags")[-1].headers["authorization"] == "Bearer for-the-upstream"


async def test_preflight_needs_no_key(keyed: httpx.AsyncClient) -> None:
    response = await keyed.options("/api/chat", headers={"origin": "http://localhost:8080",
                                                         "access-control-request-method": "POST"})
    assert response.status_code == 204
