"""Bad input gets a clear 4xx in Ollama's shape and never reaches the upstream."""

from __future__ import annotations

import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.anyio

JSON_ENDPOINTS = ["/api/chat", "/api/generate", "/api/show", "/api/embed", "/api/embeddings", "/api/pull",
                  "/api/push", "/api/create", "/api/copy"]


def assert_ollama_error(response: httpx.Response, status: int, message: str | None = None) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    if response.request.url.path.startswith("/v1/"):  # the OpenAI error object there
        assert error["type"] and error["param"] is None
        error = error["message"]
    assert isinstance(error, str) and error
    if message is not None:
        assert error == message
    return error


@pytest.mark.parametrize("path", JSON_ENDPOINTS)
async def test_empty_body(client: httpx.AsyncClient, fake: FakeOllama, path: str) -> None:
    assert_ollama_error(await client.post(path, content=b""), 400, "missing request body")
    assert fake.requests == []


async def test_empty_body_on_delete(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    assert_ollama_error(await client.request("DELETE", "/api/delete", content=b""), 400, "missing request body")
    assert fake.requests == []


@pytest.mark.parametrize("path", JSON_ENDPOINTS)
async def test_invalid_json_gets_the_parser_message(client: httpx.AsyncClient, fake: FakeOllama,
                                                    path: str) -> None:
    error = assert_ollama_error(await client.post(path, content=b'{"model": "llama3.2",'), 400)
    assert "Expecting property name" in error or "Expecting" in error
    assert fake.requests == []


async def test_json_that_is_not_an_object(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    error = assert_ollama_error(await client.post("/api/chat", content=b"[1, 2]"), 400)
    assert "object" in error
    assert fake.requests == []


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate", "/api/show", "/api/embed", "/api/embeddings",
                                  "/api/pull", "/api/create"])
async def test_missing_model(client: httpx.AsyncClient, fake: FakeOllama, path: str) -> None:
    assert_ollama_error(await client.post(path, json={"messages": [], "prompt": "x"}), 400, "model is required")
    assert_ollama_error(await client.post(path, json={"model": ""}), 400, "model is required")
    assert_ollama_error(await client.post(path, json={"model": 42}), 400, "model is required")
    assert fake.requests == []


async def test_copy_needs_source_and_destination(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    assert_ollama_error(await client.post("/api/copy", json={"source": "llama3.2"}), 400, "destination is required")
    assert fake.requests == []


async def test_openai_surface_uses_openai_error_objects(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await client.post("/v1/chat/completions", json={"messages": []})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "model is required", "type": "invalid_request_error",
                                         "param": None, "code": None}}
    assert fake.requests == []


async def test_body_over_the_limit(settings: Settings, fake: FakeOllama) -> None:
    small = settings.replace(max_body_bytes=1000)
    async with gateway_client(small, fake) as client:
        big = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "x" * 2000}]}
        error = assert_ollama_error(await client.post("/api/chat", json=big), 413)
        assert "1000" in error

        async def chunks():  # no Content-Length: the limit is enforced while reading
            for _ in range(5):
                yield b" " * 400

        assert_ollama_error(await client.post("/api/generate", content=chunks()), 413)
    assert fake.requests == []


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/chat"), ("POST", "/api/tags"),
                                              ("GET", "/api/delete"), ("PUT", "/api/show"),
                                              ("DELETE", "/v1/chat/completions")])
async def test_wrong_method(client: httpx.AsyncClient, fake: FakeOllama, method: str, path: str) -> None:
    assert_ollama_error(await client.request(method, path), 405)
    assert fake.requests == []


@pytest.mark.parametrize("path", ["/api/nothing", "/nowhere", "/api", "/v1/unknown", "/api/tags/extra/x"])
async def test_unknown_path(client: httpx.AsyncClient, fake: FakeOllama, path: str) -> None:
    assert_ollama_error(await client.get(path), 404)
    assert fake.requests == []


async def test_upstream_unreachable_gives_502_naming_it(settings: Settings) -> None:
    # port 9 (discard) on loopback: nothing listens there, the connection is refused at once
    down = settings.replace(upstream="http://127.0.0.1:9")
    from proxy.app import create_app
    from tests.conftest import running

    app = create_app(down)
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435") as client:
            for method, path, body in [("GET", "/api/version", None), ("GET", "/api/tags", None),
                                       ("POST", "/api/chat", {"model": "m", "messages": []})]:
                response = await client.request(method, path, json=body)
                error = assert_ollama_error(response, 502)
                assert error.startswith("upstream Ollama at http://127.0.0.1:9 is unreachable: ")


async def test_a_non_ascii_header_value_is_forwarded_as_sent(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    """Found by the long fuzzing run: a latin-1 header value made httpx raise (a 500)."""
    response = await client.get("/api/version", headers=[(b"x-note", "é".encode("latin-1"))])
    assert response.status_code == 200
    assert fake.requests[-1].headers["x-note"] == "é"


async def test_escapes_in_a_path_reach_the_upstream_as_sent(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    """Found by the long fuzzing run: /v1/models/%1F was decoded to a control character and httpx
    refused the URL (a 500)."""
    response = await client.get("/v1/models/%1F")
    assert response.status_code == 404  # the upstream's answer: no such model
    assert fake.requests[-1].path == "/v1/models/\x1f"  # the fake decodes, as Ollama would
    odd = await client.get("/v1/models/llama3.2%3Alatest")
    assert odd.status_code == 200 and odd.json()["id"] == "llama3.2:latest"
