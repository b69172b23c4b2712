"""Issue 29 items 5, 8 and 10: JSON GraphGate reads from outside, nested deep or holding a lone
surrogate, is a clear 4xx (a 502 for the upstream's replies), never a 500 or a dropped connection.

Item 5: a filter or metadata thousands of levels deep (``{"a":[[[[...]]]]}``) in every place a
client types JSON: the X-GraphGate-Filter header and the chat prefix on both chat APIs, /rag's
query string, form field and bodies, and the console's filter, upload, playground and model-option
fields. Python's parser recursed into RecursionError there (500; over HTTP the connection dropped).
Item 8: the upstream's /api/tags nested as deep gave 500 on the routes that read it.
Item 10: a lone surrogate in a multipart ``metadata`` field (a value or a key) gave 500 from the
store's encoder.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from proxy.app import Settings, create_app
from tests.conftest import running
from tests.console_helpers import post
from tests.fake_ollama import FakeOllama
from tests.playground_helpers import run

pytestmark = pytest.mark.anyio

DEPTHS = [999, 3000, 100_000]
URL_DEPTHS = [999, 3000, 10_000]   # percent-encoded, 100,000 levels is longer than httpx sends


def deep_filter(depth: int) -> str:
    """A filter's JSON text whose one condition is a list nested ``depth`` levels."""
    return '{"a":' + "[" * depth + "]" * depth + "}"


def chat(content: str = "Who works at Acme?") -> dict[str, Any]:
    return {"model": "llama3.2", "stream": False, "messages": [{"role": "user", "content": content}]}


def error_of(response: httpx.Response) -> str:
    error = response.json()["error"]
    return error["message"] if isinstance(error, dict) else error


def refused_as_deep(response: httpx.Response) -> None:
    assert response.status_code == 400, (response.status_code, response.text[:300])
    assert "nested deeper than 64 levels" in error_of(response), response.text[:300]


async def stored_documents(client: httpx.AsyncClient) -> int:
    return int((await client.get("/rag/documents")).json()["total"])


# ------------------------------------------------------------------ item 5: the API's JSON fields


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_filter_header_is_a_400_on_both_chat_apis(client: httpx.AsyncClient, fake: FakeOllama,
                                                               depth: int) -> None:
    for path in ("/api/chat", "/v1/chat/completions"):
        response = await client.post(path, json=chat(), headers={"X-GraphGate-Filter": deep_filter(depth)})
        refused_as_deep(response)
        assert error_of(response).startswith("X-GraphGate-Filter")
    assert fake.requests_to("/api/chat") == [] and fake.requests_to("/v1/chat/completions") == []


def test_over_a_real_connection_a_deep_filter_is_a_400_and_the_connection_stays(live_gateway: str) -> None:
    """What a client saw: a 500 from uvicorn, or the connection dropped. Now a 400 on a connection
    that then answers the next request (one connection: httpx keeps it alive)."""
    with httpx.Client(base_url=live_gateway, timeout=30, limits=httpx.Limits(max_connections=1)) as http:
        for depth in DEPTHS:
            refused_as_deep(http.post("/api/chat", json=chat(), headers={"X-GraphGate-Filter": deep_filter(depth)}))
            refused_as_deep(http.post("/v1/chat/completions", json=chat(f"/{deep_filter(depth)} Who?")))
        assert http.post("/api/chat", json=chat("/bypass Who works at Acme?")).status_code == 200


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_chat_prefix_filter_is_a_400_on_both_chat_apis(client: httpx.AsyncClient, fake: FakeOllama,
                                                                    depth: int) -> None:
    for path in ("/api/chat", "/v1/chat/completions"):
        for prefix in ("/", "/local"):
            response = await client.post(path, json=chat(f"{prefix}{deep_filter(depth)} Who works at Acme?"))
            refused_as_deep(response)
            assert "the prefix's filter" in error_of(response)
    assert fake.requests_to("/api/chat") == [] and fake.requests_to("/v1/chat/completions") == []


async def test_a_prefix_within_the_bound_still_filters_and_plain_text_stays_a_message(
        client: httpx.AsyncClient, fake: FakeOllama) -> None:
    """What held before holds: a valid filter prefix is read; braces that are not JSON are an
    ordinary message, forwarded as typed, however many brackets the text after them holds."""
    ok = await client.post("/api/chat", json=chat('/{"category": "hr"} Who works at Acme? ' + "[" * 500))
    assert ok.status_code == 200, ok.text[:300]
    plain = "/{not json} " + "{" * 500
    assert (await client.post("/api/chat", json=chat(plain))).status_code == 200
    assert fake.requests_to("/api/chat")[-1].json["messages"][-1]["content"] == plain


@pytest.mark.parametrize("depth", URL_DEPTHS)
async def test_a_deep_filter_in_the_documents_query_string_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    response = await client.get("/rag/documents", params={"filter": deep_filter(depth)})
    refused_as_deep(response)


@pytest.mark.parametrize("depth", DEPTHS)
async def test_deep_metadata_in_an_upload_form_is_a_400_and_nothing_is_stored(client: httpx.AsyncClient,
                                                                               depth: int) -> None:
    response = await client.post("/rag/documents", data={"metadata": deep_filter(depth)},
                                 files=[("files", ("a.txt", b"Dana works at Acme.", "text/plain"))])
    refused_as_deep(response)
    assert error_of(response).startswith("metadata")
    assert await stored_documents(client) == 0


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_filter_given_as_text_in_a_query_body_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    refused_as_deep(await client.post("/rag/query", json={"query": "Who works at Acme?",
                                                          "filters": deep_filter(depth)}))


async def test_a_deep_filter_or_metadata_inside_a_body_is_a_400(client: httpx.AsyncClient) -> None:
    """Within what a body may nest (so the body parses), a field still may not nest deeper than a
    filter or metadata can: refused before anything walks it. (A guard: 400 before too, by the
    checks after the walk.)"""
    value = json.loads(deep_filter(150))
    query = await client.post("/rag/query", json={"query": "Who works at Acme?", "filters": value})
    upload = await client.post("/rag/documents", json={"name": "a.txt", "text": "Dana works at Acme.",
                                                       "metadata": value})
    assert (query.status_code, upload.status_code) == (400, 400), (query.text[:300], upload.text[:300])
    assert await stored_documents(client) == 0


# ------------------------------------------------------- item 5: a whole chat body, nested deep


def deep_body(depth: int, field: str) -> bytes:
    """A chat body whose ``field`` (tools or format) nests ``depth`` levels of lists."""
    body = json.dumps(chat()).encode()
    return body[:-1] + f',"{field}":'.encode() + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
async def test_a_deeply_nested_chat_body_is_a_400(client: httpx.AsyncClient, fake: FakeOllama, depth: int,
                                                  path: str) -> None:
    """A guard (this held before, by catching RecursionError): now refused by the bound, before parsing."""
    for field in ("tools", "format"):
        response = await client.post(path, content=deep_body(depth, field),
                                     headers={"content-type": "application/json"})
        assert response.status_code == 400, (response.status_code, response.text[:300])
        assert "invalid JSON: nested" in error_of(response), response.text[:300]
    assert fake.requests_to("/api/chat") == [] and fake.requests_to("/v1/chat/completions") == []


def nested_schema(levels: int) -> dict[str, Any]:
    """A tool's parameters: an object holding a list of objects holding... ``levels`` deep."""
    schema: dict[str, Any] = {"type": "string"}
    for level in range(levels):
        schema = {"type": "object", "properties": {f"name{level}": {"type": "string"},
                                                    f"children{level}": {"type": "array", "items": schema}}}
    return schema


async def test_a_real_clients_nested_tool_schema_is_forwarded_as_sent(client: httpx.AsyncClient,
                                                                      fake: FakeOllama) -> None:
    """The body's bound leaves room for real bodies: a tool schema of 30 object levels (95
    levels of JSON, deeper than any real one) is forwarded untouched."""
    tool = {"type": "function", "function": {"name": "lookup", "description": "look it up",
                                             "parameters": nested_schema(30)}}
    body = {**chat("/bypass Who works at Acme?"), "tools": [tool]}
    response = await client.post("/api/chat", json=body)
    assert response.status_code == 200, response.text[:300]
    assert fake.requests_to("/api/chat")[-1].json["tools"] == [tool]


# ------------------------------------------------------------------- item 5: the console's fields


@pytest.mark.parametrize("depth", URL_DEPTHS)
async def test_a_deep_filter_on_the_console_documents_page_is_said_beside_the_table(client: httpx.AsyncClient,
                                                                                     depth: int) -> None:
    page = await client.get("/admin/documents", params={"filter": deep_filter(depth)})
    assert page.status_code == 400 and "nested deeper than 64 levels" in page.text, page.text[:300]


@pytest.mark.parametrize("depth", DEPTHS)
async def test_deep_metadata_in_the_console_upload_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    files = [("files", ("a.txt", b"Dana works at Acme.", "text/plain"))]
    response = await post(client, "/admin/documents", {"metadata": deep_filter(depth)}, files=files)
    assert response.status_code == 400 and "nested deeper than 64 levels" in response.text, response.text[:300]
    assert await stored_documents(client) == 0


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_filter_in_the_playground_is_a_400(client: httpx.AsyncClient, depth: int) -> None:
    response = await run(client, query="Who works at Acme?", mode="naive", filters=deep_filter(depth))
    assert response.status_code == 400 and "nested deeper than 64 levels" in response.text, response.text[:300]


@pytest.mark.parametrize("depth", DEPTHS)
async def test_deep_model_options_in_the_console_are_a_400(client: httpx.AsyncClient, depth: int) -> None:
    form = {"alias": "hr-bot", "model": "llama3.2:latest", "kb": "default", "mode": "", "system": "",
            "options": '{"temperature":' + "[" * depth + "]" * depth + "}"}
    response = await post(client, "/admin/models", form)
    assert response.status_code == 400 and "nested deeper than 64 levels" in response.text, response.text[:300]
    assert (await client.get("/rag/models")).json()["models"] == []


# ------------------------------------------------------------- item 8: the upstream's model list


def deep_tags(depth: int) -> bytes:
    return (b'{"models":[{"name":"llama3.2:latest","model":"llama3.2:latest","details":'
            + b"[" * depth + b"]" * depth + b"}]}")


class DeepTags:
    """The fake Ollama, but its /api/tags answers 200 with a model list nested ``depth`` levels."""

    def __init__(self, fake: FakeOllama, depth: int) -> None:
        self.fake, self.depth = fake, depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/tags":
            return await self.fake.app(scope, receive, send)
        body = deep_tags(self.depth)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def gateway_over(settings: Settings, transports: dict[str, httpx.AsyncBaseTransport]
                       ) -> AsyncIterator[httpx.AsyncClient]:
    if len(transports) == 1:
        app = create_app(settings, upstream_transport=next(iter(transports.values())))
    else:
        app = create_app(settings.replace(upstream=",".join(transports)), upstream_transports=transports)
    async with running(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:11435",
                                     timeout=30) as client:
            yield client


async def assert_lists_are_a_readable_502(client: httpx.AsyncClient) -> None:
    for method, path, body in (("GET", "/api/tags", None), ("GET", "/rag/models", None),
                               ("PUT", "/rag/models/hr-bot", {"model": "llama3.2"})):
        response = await client.request(method, path, json=body)
        assert response.status_code == 502, (path, response.status_code, response.text[:300])
        error = response.json()["error"]
        assert "upstream Ollama" in error and "/api/tags" in error and "nested deeper than" in error, error
    assert (await client.get("/rag/models")).status_code == 502
    assert (await client.get("/rag/kbs")).status_code == 200   # the gateway itself is fine


@pytest.mark.parametrize("depth", [3000, 100_000])
async def test_a_deeply_nested_model_list_from_the_upstream_is_a_readable_502(settings: Settings,
                                                                              depth: int) -> None:
    transport = httpx.ASGITransport(app=DeepTags(FakeOllama(), depth))
    async with gateway_over(settings, {settings.upstream: transport}) as client:
        await assert_lists_are_a_readable_502(client)


@pytest.mark.parametrize("depth", [300, 3000])
async def test_several_upstreams_all_with_deep_model_lists_are_a_readable_502(settings: Settings,
                                                                              depth: int) -> None:
    """The pool merges its members' lists: one nested past what it can read or write again (300:
    orjson's writing limit; 3000: its reading one) is skipped; when every member's is, a 502."""
    urls = ("http://127.0.0.1:11501", "http://127.0.0.1:11502")
    transports: dict[str, httpx.AsyncBaseTransport] = {
        url: httpx.ASGITransport(app=DeepTags(FakeOllama(), depth)) for url in urls}
    async with gateway_over(settings, transports) as client:
        await assert_lists_are_a_readable_502(client)


async def test_one_upstream_with_a_deep_model_list_is_skipped_by_the_pool(settings: Settings) -> None:
    urls = ("http://127.0.0.1:11501", "http://127.0.0.1:11502")
    transports: dict[str, httpx.AsyncBaseTransport] = {
        urls[0]: httpx.ASGITransport(app=DeepTags(FakeOllama(), 300)), urls[1]: FakeOllama().transport()}
    async with gateway_over(settings, transports) as client:
        tags = await client.get("/api/tags")
        assert tags.status_code == 200 and "llama3.2:latest" in [m["name"] for m in tags.json()["models"]]
        assert (await client.put("/rag/models/hr-bot", json={"model": "llama3.2"})).status_code == 201


# --------------------------------------------------------- item 10: a lone surrogate in a metadata field

SURROGATES = ['{"source": "\\ud800"}', '{"\\udc00": "x"}', '{"tags": ["ok", "\\ud83d"]}']


@pytest.mark.parametrize("metadata", SURROGATES)
async def test_a_lone_surrogate_in_the_upload_forms_metadata_is_a_400(client: httpx.AsyncClient,
                                                                      metadata: str) -> None:
    files = [("files", ("a.txt", b"Dana works at Acme.", "text/plain"))]
    api = await client.post("/rag/documents", data={"metadata": metadata}, files=files)
    assert api.status_code == 400, (api.status_code, api.text[:300])
    assert error_of(api).startswith("metadata") and "lone UTF-16 surrogate" in error_of(api), api.text[:300]
    console = await post(client, "/admin/documents", {"metadata": metadata}, files=files)
    assert console.status_code == 400 and "lone UTF-16 surrogate" in console.text, console.text[:300]
    assert await stored_documents(client) == 0


async def test_a_lone_surrogate_in_the_console_metadata_edit_changes_nothing(client: httpx.AsyncClient) -> None:
    uploaded = await client.post("/rag/documents", json={"name": "a.txt", "text": "Dana works at Acme.",
                                                         "metadata": {"source": "hr"}})
    doc = uploaded.json()["documents"][0]["id"]
    for metadata in SURROGATES:
        response = await post(client, f"/admin/documents/{doc}/metadata", {"metadata": metadata})
        assert response.status_code == 400 and "lone UTF-16 surrogate" in response.text, response.text[:300]
    assert (await client.get(f"/rag/documents/{doc}")).json()["metadata"] == {"source": "hr"}


async def test_a_lone_surrogate_in_a_filter_header_or_query_string_is_a_400(client: httpx.AsyncClient,
                                                                           fake: FakeOllama) -> None:
    """A filter is kept in the turn's trace and the answer cache's key: refused as metadata is. (A
    guard: a 400 before too, "must be JSON"; now it names the surrogate.)"""
    chat_reply = await client.post("/api/chat", json=chat(), headers={"X-GraphGate-Filter": SURROGATES[0]})
    assert chat_reply.status_code == 400 and "X-GraphGate-Filter" in error_of(chat_reply), chat_reply.text
    listed = await client.get("/rag/documents", params={"filter": SURROGATES[1]})
    assert listed.status_code == 400 and "filter" in error_of(listed), listed.text
    assert fake.requests_to("/api/chat") == []


# ------------------------------- the same bound on the model's replies to GraphGate's own calls


async def test_a_keyword_reply_nested_deep_leaves_the_chat_unaugmented_and_the_service_up(
        settings: Settings, fake: FakeOllama) -> None:
    """Found while here: the keyword call's reply was read with json.loads, so a model answering
    ``{"high_level_keywords": [[[[...]]]]}`` raised RecursionError in the knowledge service's task
    group, which took the service down. Now it is a reply without keywords, as any unreadable one."""
    deep = '{"high_level_keywords":' + "[" * 3000 + "]" * 3000 + "}"
    fake.structured = lambda request: deep
    async with gateway_over(settings, {settings.upstream: fake.transport()}) as client:
        for _ in range(2):
            answer = await client.post("/api/chat", json=chat())
            assert answer.status_code == 200, answer.text[:300]
            query = await client.post("/rag/query", json={"query": "Who works at Acme?", "mode": "hybrid"})
            assert query.status_code == 200, query.text[:300]
            assert query.json()["keywords"]["high_level"] == []
