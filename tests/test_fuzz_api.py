"""Property-based fuzzing of every route: /api/*, /v1/*, /rag/* and the console under /admin.

The real app runs in-process over the fake upstream, started once per module in a background
event loop (an anyio blocking portal); each hypothesis example is one request sent through that
portal and bounded in time. For every example:

- never a 5xx of GraphGate's own making: a 5xx passes only when it is the upstream's own answer
  relayed (the strategies never name the fake's special failing models, so in practice none);
- never a hang (``anyio.fail_after`` around the request);
- a 4xx that GraphGate itself produced has its surface's error shape: ``{"error": "..."}`` on the
  Ollama surface and /rag, the OpenAI error object under /v1, an HTML page under /admin; a 4xx the
  upstream produced is relayed byte for byte;
- a rejected request (4xx) changes nothing: every table of the store, the in-memory graph and
  vector indexes, /rag/stats and the upstream's models are compared before and after. (When the
  upstream rejected a chat that GraphGate had already augmented, the turn's trace and the keyword
  cache may have been written: only those two tables are exempt then.)

CI runs a modest, derandomised number of examples; ``HYPOTHESIS_PROFILE=long`` runs 25 times as
many with fresh randomness: ``HYPOTHESIS_PROFILE=long pytest tests/test_fuzz_api.py tests/test_fuzz_uploads.py``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import anyio.from_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Mount, Route

from proxy.app import Settings, create_app
from tests.conftest import NOMINAL_UPSTREAM, running
from tests.console_helpers import csrf_of
from tests.extractor import KnownFacts
from tests.fake_ollama import SPECIAL_MODELS, FakeOllama
from tests.test_ingestion import CITY, PEOPLE, TEAM

from admin.rendering import ref  # noqa: E402 - after proxy (admin imports proxy)

# ------------------------------------------------------------------------------------ profiles

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLE_TIMEOUT = 15.0  # seconds a request may take before it counts as a hang

settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("long", deadline=None, print_blob=True)


def fuzz_settings(examples: int) -> settings:
    """CI: ``examples`` derandomised examples; HYPOTHESIS_PROFILE=long: 25 times as many, random."""
    return settings(settings.get_profile("long" if LONG else "ci"), max_examples=examples * (25 if LONG else 1),
                    suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------------- the upstream


@dataclass
class UpstreamCall:
    method: str
    path: str
    status: int
    body: bytes


class RecordingTransport(httpx.AsyncBaseTransport):
    """The fake upstream in-process, answering as a real server would (an exception inside the
    fake becomes a 500, as uvicorn would send it), every answer recorded."""

    def __init__(self, fake: FakeOllama) -> None:
        self.inner = httpx.ASGITransport(app=fake.app, client=("127.0.0.1", 40000), raise_app_exceptions=False)
        self.calls: list[UpstreamCall] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        self.calls.append(UpstreamCall(request.method, request.url.path, response.status_code, body))
        return httpx.Response(response.status_code, headers=response.headers, stream=httpx.ByteStream(body),
                              extensions=response.extensions)


# ------------------------------------------------------------------------------------ harness


@dataclass
class Harness:
    portal: Any
    client: httpx.AsyncClient
    app: Any
    fake: FakeOllama
    upstream: RecordingTransport
    settings: Settings
    models: dict[str, dict] = field(default_factory=dict)
    documents: list[str] = field(default_factory=list)
    entity_keys: list[str] = field(default_factory=list)
    csrf: str = ""
    last_snapshot: dict[str, Any] | None = None  # taken after a rejected request: still the state

    @property
    def kb(self):
        return self.app.state.gateway.knowledge

    def run(self, fn, *args):
        return self.portal.call(fn, *args)

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return "Harness(...)"


def fuzz_app_settings(data_dir: Path, **changes: Any) -> Settings:
    base = Settings.load(environ={"GRAPHGATE_UPSTREAM": NOMINAL_UPSTREAM, "GRAPHGATE_DATA_DIR": str(data_dir)})
    return base.replace(**{"max_body_bytes": 512 * 1024, "max_upload_bytes": 64 * 1024, "llm_retries": 1,
                           "gleaning": 0, "retrieval_timeout": 5.0, **changes})


@contextlib.contextmanager
def started(settings: Settings, *, seed: bool = True, client_host: str = "127.0.0.1") -> Iterator[Harness]:
    """The gateway over the fake upstream, running in a background event loop, seeded with two
    processed documents (six entities) unless ``seed`` is false."""
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    upstream = RecordingTransport(fake)
    app = create_app(settings, upstream_transport=upstream)
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as portal:
        with portal.wrap_async_context_manager(running(app)):
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=(client_host, 50000))
            client = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435")
            harness = Harness(portal, client, app, fake, upstream, settings, models=copy.deepcopy(fake.models))
            try:
                portal.call(_prepare, harness, seed)
                yield harness
            finally:
                portal.call(client.aclose)


async def _prepare(h: Harness, seed: bool) -> None:
    kb = h.kb
    # commit traces and cache entries at once, so that "nothing changed" can be checked exactly
    kb.traces.max_delay = kb.cache_writes.max_delay = 0.0
    if seed:
        for name, text in (("team.txt", TEAM), ("city.md", CITY)):
            response = await h.client.post("/rag/documents", json={"name": name, "text": text})
            assert response.status_code == 202, response.text
            h.documents.append(response.json()["documents"][0]["id"])
        await quiesce(h)
        h.entity_keys = await kb.store.db.read(
            lambda con: [r[0] for r in con.execute("SELECT name_key FROM entities ORDER BY 1").fetchall()])
        assert len(h.entity_keys) == len(PEOPLE)
    page = await h.client.get("/admin/")
    if page.status_code == 200:
        h.csrf = csrf_of(page.text)


async def quiesce(h: Harness) -> None:
    """Wait until the pipeline is idle and every queued trace or cache write is committed."""
    kb = h.kb
    if kb is None:
        return
    with anyio.fail_after(30):
        for _ in range(3):
            await anyio.sleep(0)  # let tasks just started by the request queue their writes
        await kb.pipeline.wait_idle()
        while kb.traces._pending or kb.cache_writes._pending:
            await anyio.sleep(0.002)
        await kb.store.db.write(lambda con: None)  # behind the write lock: any commit under way is done


VOLATILE_TABLES = ("traces", "llm_cache")  # what an upstream-rejected but augmented chat may write


def _tables(con) -> dict[str, list[str]]:
    names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
    return {name: sorted(map(repr, con.execute(f'SELECT * FROM "{name}"').fetchall())) for name in names}


async def snapshot(h: Harness) -> dict[str, Any]:
    """Everything a request could change: the store's tables, its in-memory side, /rag/stats."""
    kb = h.kb
    state: dict[str, Any] = {"upstream_models": sorted(h.fake.models)}
    if kb is None:
        return state

    async def tables() -> None:
        state["tables"] = await kb.store.db.read(_tables)

    async def stats() -> None:
        state["stats"] = (await h.client.get("/rag/stats")).json()
        state["stats"].pop("bytes_on_disk", None)

    async with anyio.create_task_group() as group:  # two reader threads at once
        group.start_soon(tables)
        group.start_soon(stats)
    with kb.store.memory_lock:
        state["graph"] = (kb.store.graph.vertex_count, kb.store.graph.edge_count)
        state["indexes"] = {name: len(index) for name, index in kb.store.indexes.items()}
    state["generation"] = kb.store.generation
    return state


def _without_volatile(state: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(state)
    for name in VOLATILE_TABLES:
        out.get("tables", {}).pop(name, None)
    out.get("stats", {}).pop("cache_entries", None)
    return out


# ------------------------------------------------------------------------------- the checks


@dataclass
class Sent:
    method: str
    path: str  # already percent-encoded
    query: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")

    def __repr__(self) -> str:
        body = self.body if self.body is None or len(self.body) < 300 else self.body[:300] + b"..."
        return f"{self.method} {self.url} headers={self.headers} body={body!r}"


def _surface(path: str) -> str:
    if path.startswith("/admin"):
        return "admin"
    if path.startswith("/v1/"):
        return "openai"
    if path.startswith("/rag/"):
        return "rag"
    return "ollama"


def check_error_shape(sent: Sent, response: httpx.Response) -> None:
    """A 4xx GraphGate produced itself, in the shape its surface's clients parse."""
    surface = _surface(response.request.url.path)
    if sent.method == "HEAD":
        return
    if surface == "admin":
        kind = response.headers.get("content-type", "")
        if response.status_code == 401 and "hx-redirect" in response.headers:
            return
        assert kind.startswith(("text/html", "application/json")), (sent, response.status_code, kind)
        assert "Traceback" not in response.text
        return
    assert response.headers.get("content-type", "").startswith("application/json"), (sent, response.text[:300])
    body = response.json()
    assert isinstance(body, dict), (sent, body)
    error = body.get("error")
    if surface == "openai":
        assert isinstance(error, dict), (sent, body)
        assert isinstance(error.get("message"), str) and error["message"], (sent, body)
        assert error.get("type") in ("invalid_request_error", "not_found_error"), (sent, body)
        assert "param" in error and "code" in error, (sent, body)
    else:
        assert isinstance(error, str) and error, (sent, body)


async def exchange(h: Harness, sent: Sent, *, check_unchanged: bool = True) -> httpx.Response:
    """Send one request and check everything the module promises about its answer."""
    await quiesce(h)
    before = (h.last_snapshot or await snapshot(h)) if check_unchanged else None
    h.last_snapshot = None
    mark = len(h.upstream.calls)
    with anyio.fail_after(EXAMPLE_TIMEOUT):
        response = await h.client.request(sent.method, sent.url, content=sent.body,
                                          headers={k.encode(): v.encode() for k, v in sent.headers.items()})
        await response.aread()
    check_host_split(sent, response)
    # the upstream's models are the fake's state, not GraphGate's: put them back for the next example
    h.fake.models = copy.deepcopy(h.models)
    h.fake.loaded = {"llama3.2:latest"}
    h.fake.blobs.clear()
    h.fake.requests.clear()
    calls = h.upstream.calls[mark:]
    del h.upstream.calls[:]
    path = response.request.url.path
    forwarded = [c for c in calls if c.path == path]
    status = response.status_code
    if status >= 500:
        relayed = forwarded and forwarded[-1].status == status and forwarded[-1].body == response.content
        assert relayed, f"{sent!r} -> {status}: {response.text[:500]}"
    if 400 <= status < 500:
        if forwarded and forwarded[-1].status == status and _surface(path) in ("ollama", "openai"):
            assert forwarded[-1].body == response.content, (sent, response.text[:300])  # relayed as it was
            relayed = True
        else:
            check_error_shape(sent, response)
            relayed = False
        if check_unchanged:
            await quiesce(h)
            after = await snapshot(h)
            h.last_snapshot = after
            if relayed or calls:  # the upstream was asked: an augmented turn may have been traced
                assert _without_volatile(after) == _without_volatile(before), f"{sent!r} -> {status} changed the store"
            else:
                assert after == before, f"{sent!r} -> {status} changed the store"
    return response


# ----------------------------------------------------------------------------- the routes


@functools.cache
def app_routes(app) -> list[tuple[str, tuple[str, ...]]]:
    """(path template, methods) of every route, Mount children included; a mounted app (static
    files) as ``{path:path}`` under its prefix."""
    out: list[tuple[str, tuple[str, ...]]] = []

    def walk(routes, prefix: str) -> None:
        for route in routes:
            if isinstance(route, Route):
                out.append((prefix + route.path, tuple(sorted(route.methods or {"GET"}))))
            elif isinstance(route, Mount):
                if route.routes:
                    walk(route.routes, prefix + route.path)
                else:
                    out.append((prefix + route.path + "/{path:path}", ("GET", "HEAD")))

    walk(app.routes, "")
    return out


PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

MODEL_NAMES = ["llama3.2", "llama3.2:latest", "qwen3", "qwen3:latest", "nomic-embed-text", "unknown-model",
               "library/llama3.2:latest", "", " ", "a" * 300, "../../etc/passwd", "<script>", "\x00"]
NASTY = ["", " ", "..", "../..", "%2e%2e", "a/b", "\x00", "\u202e", "💥", "<script>alert(1)</script>",
         "' OR 1=1 --", "%", "_", "\\", "NaN", "Infinity", "-1", "0", "1e309", "9" * 40, "²", "٣", "true",
         "null", "{}", "[]", "x" * 1000]


def _not_special(text: str) -> bool:
    return text.removesuffix(":latest") not in SPECIAL_MODELS


# a lone UTF-16 surrogate: valid JSON once escaped ("\\ud800"), not valid Unicode; GraphGate answers 400
lone_surrogates = st.builds(lambda a, code, b: a + chr(code) + b, st.text(max_size=8), st.integers(0xD800, 0xDFFF),
                            st.text(max_size=8))
model_names = st.one_of(st.sampled_from(MODEL_NAMES), st.text(max_size=30), lone_surrogates).filter(_not_special)


def param_values(h: Harness, name: str) -> st.SearchStrategy[str]:
    """Values for a path parameter: the seeded store's ids and names, nasty strings, random text."""
    if (name, id(h)) not in _PARAM_CACHE:
        _PARAM_CACHE[(name, id(h))] = _param_values(h, name)
    return _PARAM_CACHE[(name, id(h))]


_PARAM_CACHE: dict[tuple[str, int], st.SearchStrategy[str]] = {}


def _param_values(h: Harness, name: str) -> st.SearchStrategy[str]:
    entity_names = [n for name in PEOPLE for n in (name, name.lower(), name.upper())]
    known: list[str] = {
        "id": [*h.documents, "doc-nope", "1", "00"],
        "name": entity_names,
        "ref": [ref(k) for k in h.entity_keys] + [ref("\x1f".join(sorted(h.entity_keys[:2])))] if h.entity_keys
        else ["x"],
        "key": [ref("nope"), "x", "clear"],
        "kind": ["extract", "summary", "keywords", "answer", "clear"],
        "token": ["x", "a" * 24],
        "digest": ["sha256:" + "0" * 64, "sha256-" + "a" * 64, "sha256:zz"],
        "model": MODEL_NAMES,
        "path": ["console.css", "console.js", "htmx.min.js", "../../pyproject.toml", "%2e%2e/%2e%2e/pyproject.toml",
                 "..%2f..%2fpyproject.toml", "/etc/passwd", "nope.js"],
    }.get(name, ["x"])
    return st.one_of(st.sampled_from(known), st.sampled_from(NASTY), st.text(max_size=40),
                     st.text(max_size=20).map(ref))


def fill(template: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        return quote(value, safe="/") if match.group(2) == "path" else quote(value, safe="")

    return PARAM.sub(one, template)


# ----------------------------------------------------------------------------- the bodies

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), lone_surrogates,
                    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "0x10", "1_000", "true"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)

roles = st.sampled_from(["user", "assistant", "system", "tool", "", "USER", "developer", "<b>"])
message = st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(st.text(max_size=80), json_values)},
                          optional={"images": json_values, "tool_calls": json_values, "thinking": json_values,
                                    "name": json_values}),
    st.fixed_dictionaries({"role": roles, "content": st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "x"]), "text": st.one_of(st.text(max_size=40), json_values)}),
        max_size=3)}),
    json_values,
)
messages = st.one_of(st.lists(message, max_size=4), json_values)
prefixes = st.sampled_from(["", "/local ", "/global ", "/naive ", "/bypass ", "/context ", "/mix[be brief] ",
                            "/[x] ", "/nonsense ", "/"])
questions = st.builds(lambda p, q: p + q, prefixes,
                      st.one_of(st.sampled_from(["Who works at Acme Corp?", "Where is Berlin?", "Orion"]),
                                st.text(max_size=60), lone_surrogates))


def _user_turn(q: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": q}]


EXPECTED: dict[str, st.SearchStrategy[Any]] = {
    "model": st.one_of(model_names, json_values),
    "name": st.one_of(model_names, json_values),
    "messages": st.one_of(messages, questions.map(_user_turn)),
    "prompt": st.one_of(questions, json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "format": st.one_of(st.sampled_from(["json", "", "xml"]), json_values),
    "options": st.one_of(st.fixed_dictionaries({}, optional={"num_ctx": json_values, "temperature": json_values}),
                         json_values),
    "think": st.one_of(st.sampled_from([True, False, "low", "high", "max", "huge"]), json_values),
    "tools": json_values,
    "keep_alive": st.one_of(st.sampled_from([0, "0", "5m", -1, "0s"]), json_values),
    "input": st.one_of(st.text(max_size=40), st.lists(st.text(max_size=20), max_size=3), json_values),
    "raw": json_values, "system": json_values, "template": json_values, "images": json_values,
    "source": st.one_of(model_names, json_values), "destination": st.one_of(model_names, json_values),
    "from": st.one_of(model_names, json_values), "parameters": json_values, "insecure": json_values,
    "stream_options": json_values, "max_tokens": json_values, "dimensions": json_values,
    "response_format": json_values, "reasoning_effort": json_values,
    # /rag
    "query": st.one_of(questions, json_values), "history": st.one_of(messages, json_values),
    "num_ctx": st.one_of(st.integers(-5, 10**7), json_values), "answer": json_values,
    "mode": st.one_of(st.sampled_from(["local", "global", "hybrid", "mix", "naive", "bypass", "bogus"]), json_values),
    "top_k": json_values, "chunk_top_k": json_values, "max_total_tokens": json_values, "cosine_threshold": json_values,
    "related_chunks": json_values, "chunk_selection": json_values, "keywords": json_values,
    "hl_keywords": json_values, "ll_keywords": json_values,
    "text": st.one_of(st.text(max_size=200), json_values), "type": json_values, "description": json_values,
    "weight": json_values, "target": st.one_of(st.sampled_from(list(PEOPLE)), json_values),
    "entities": st.one_of(st.lists(st.sampled_from(list(PEOPLE)), max_size=3), json_values),
    "dry_run": st.one_of(st.just(True), json_values),
}

ROUTE_KEYS = {
    "/api/chat": ("model", "messages", "stream", "format", "options", "think", "tools", "keep_alive"),
    "/api/generate": ("model", "prompt", "stream", "format", "options", "think", "raw", "system", "template",
                      "images", "keep_alive"),
    "/api/embed": ("model", "input", "dimensions", "keep_alive", "options"),
    "/api/embeddings": ("model", "prompt", "options"),
    "/api/show": ("model", "name"),
    "/api/pull": ("model", "name", "stream", "insecure"),
    "/api/push": ("model", "name", "stream", "insecure"),
    "/api/create": ("model", "name", "from", "system", "template", "parameters", "stream"),
    "/api/copy": ("source", "destination"),
    "/api/delete": ("model", "name"),
    "/v1/chat/completions": ("model", "messages", "stream", "stream_options", "max_tokens", "tools",
                             "response_format", "reasoning_effort"),
    "/v1/completions": ("model", "prompt", "stream", "max_tokens"),
    "/v1/embeddings": ("model", "input", "dimensions"),
    "/rag/query": ("query", "history", "num_ctx", "answer", "model", "mode", "top_k", "chunk_top_k",
                   "max_total_tokens", "cosine_threshold", "related_chunks", "chunk_selection", "keywords",
                   "hl_keywords", "ll_keywords"),
    "/rag/documents": ("name", "text"),
    "/rag/merge": ("entities", "target", "type", "description", "dry_run"),
    "/rag/relations": ("source", "target", "keywords", "description", "weight"),
    "/rag/entities": ("name", "type", "description"),
}
ALL_KEYS = tuple(EXPECTED)


@functools.cache
def objects(keys: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of the expected keys (plausible or wrongly typed values) and random extras."""
    if len(keys) > 20:  # any route's keys: a few of them (drawing all sixty optional keys is slow)
        base = st.lists(st.sampled_from(keys), max_size=4, unique=True).flatmap(
            lambda some: st.fixed_dictionaries({k: EXPECTED[k] for k in some}))
    else:
        base = st.fixed_dictionaries({}, optional={k: EXPECTED[k] for k in keys})
    extras = st.dictionaries(st.text(max_size=10), json_values, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, base, extras)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dumps(value: Any) -> bytes:
    """UTF-8 JSON; a surrogate is written as its escape, as a client's JSON encoder does (raw, it
    would be bad UTF-8, which ``raw_bodies`` sends as well)."""
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text).encode("utf-8")


def lone_surrogate_in(raw: bytes | None) -> bool:
    """Whether ``raw`` is a JSON object holding a lone surrogate in a key or string."""
    try:
        stack = [json.loads(raw)] if raw else []
    except (ValueError, RecursionError):
        return False
    if not stack or not isinstance(stack[0], dict):
        return False
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any(_SURROGATE.search(k) for k in value):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and _SURROGATE.search(value):
            return True
    return False


def check_lone_surrogate_refused(sent: Sent, response: httpx.Response) -> None:
    """A JSON body with a lone surrogate is a 400 that says so (issue 16 item 7), never a 500 or a reset."""
    if sent.headers.get("content-type", "").startswith("multipart/") or not lone_surrogate_in(sent.body):
        return
    assert response.status_code == 400 and "surrogate" in response.text, (sent, response.status_code,
                                                                         response.text[:300])


def _deep(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'{"model":"llama3.2","messages":[{"role":"user","content":"hi"}],"options":' + \
        b'{"a":' * depth + b"1" + b"}" * depth + b"}"


@functools.cache
def raw_bodies(keys: tuple[str, ...]) -> st.SearchStrategy[bytes | None]:
    """Bytes for a body: JSON objects, other JSON, bytes, broken UTF-8, deep nesting, huge numbers."""
    good_object = objects(keys).map(_dumps)
    return st.one_of(
        good_object, good_object, good_object,
        st.none(),
        json_values.map(_dumps),
        st.binary(max_size=200),
        st.builds(lambda o, junk: o[:-1] + b',"x":"' + junk + b'"}' if o.endswith(b"}") else o + junk,
                  good_object, st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80"])),
        st.builds(_deep, st.integers(1, 60_000), st.sampled_from(["array", "object", "options"])),
        st.builds(lambda n, k: ('{"model":"llama3.2","%s":1%s}' % (k, "0" * n)).encode(), st.integers(300, 6000),
                  st.sampled_from(["num_ctx", "top_k", "dimensions", "options", "weight"])),
        st.sampled_from([b'{"model":"llama3.2","num_ctx":1e999}', b'{"query":"x","num_ctx":NaN}',
                         b'{"query":"x","top_k":Infinity}', b'{"query":"x","cosine_threshold":-Infinity}',
                         b'{"model":"llama3.2"', b'{"model":"llama3.2",}', b"\xef\xbb\xbf{}", b"{}" * 3,
                         b'"just a string"', b"null", b"0", b"  \n\t ", b'{"model":"\\ud800"}',
                         b'{"model": "llama3.2", "model": 5}']),
        st.builds(lambda o, k: o[:k], good_object, st.integers(0, 40)),
    )


CONTENT_TYPES = [None, "application/json", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data", "multipart/form-data; boundary=xyz", "application/json; charset=latin-1",
                 "*/*", "\u00e9"]


@st.composite
def headers(draw) -> dict[str, str]:
    out: dict[str, str] = {}
    kind = draw(st.sampled_from(CONTENT_TYPES))
    if kind is not None:
        out["content-type"] = kind  # sent as UTF-8 bytes: a non-ASCII header value too
    if draw(st.booleans()):
        out["x-graphgate-mode"] = draw(st.sampled_from(["local", "bypass", "bogus", "", "naive"]))
    if draw(st.integers(0, 9)) == 0:
        out["x-task"] = draw(st.sampled_from(["title_generation", "{{TASK}}", ""]))
    if draw(st.integers(0, 5)) == 0:
        out["hx-request"] = "true"
        out["hx-target"] = draw(st.sampled_from(["document-table", "entity-table", "cache-rows", "x"]))
    if draw(st.integers(0, 9)) == 0:
        out["origin"] = draw(st.sampled_from(["http://localhost:3000", "http://evil.example", "null"]))
    if draw(st.integers(0, 4)) == 0:  # a Host header: this machine's names, or a rebinding page's (issue 16)
        out["host"] = draw(st.sampled_from(ALLOWED_HOSTS + REFUSED_HOSTS))
    return out


# the fuzzed gateway binds loopback without GRAPHGATE_ALLOWED_HOSTS: IP literals and localhost pass
ALLOWED_HOSTS = ["127.0.0.1:11435", "localhost", "LOCALHOST:1", "[::1]:11435", "app.localhost:3000", "10.0.0.7",
                 "127.0.0.1", "localhost."]
REFUSED_HOSTS = ["rebind.attacker.example:11435", "evil.example", "127.0.0.1.nip.io:11435", "localhost.evil.example",
                 "gateway.lan", "é.example", "a b", "xn--80ak6aa92e.com:80"]
HOST_REFUSAL = "is not allowed: open the gateway as localhost"


def check_host_split(sent: Sent, response: httpx.Response) -> None:
    """A refused Host gets 403 whatever else the request is; an allowed one is never refused for it."""
    host = sent.headers.get("host")
    if host in REFUSED_HOSTS:
        assert response.status_code == 403, (sent, response.status_code)
        if sent.method != "HEAD":
            assert HOST_REFUSAL in response.text, (sent, response.text[:300])
    else:
        assert HOST_REFUSAL not in response.text, (sent, response.status_code)


QUERY_KEYS = ["limit", "offset", "status", "search", "sort", "order", "page", "q", "depth", "cap", "entity", "key",
              "target", "type", "name", "next", "kind"]


def query_params() -> st.SearchStrategy[list[tuple[str, str]]]:
    value = st.one_of(st.sampled_from(NASTY), st.text(max_size=20), st.integers(-3, 2000).map(str),
                      st.sampled_from(["asc", "desc", "name", "degree", "processed", "failed", "created_at"]))
    return st.lists(st.tuples(st.one_of(st.sampled_from(QUERY_KEYS), st.text(max_size=6)), value), max_size=4)


# ------------------------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with started(fuzz_app_settings(tmp_path_factory.mktemp("fuzz-api") / "data")) as harness:
        yield harness


def _keys_for(path: str) -> tuple[str, ...]:
    for prefix, keys in ROUTE_KEYS.items():
        if path == prefix or path.startswith(prefix + "/"):
            return keys
    return ALL_KEYS


@st.composite
def any_request(draw, h: Harness) -> Sent:
    template, methods = draw(st.sampled_from(app_routes(h.app)))
    if draw(st.integers(0, 9)) == 0:  # a path no route has
        template, methods = "/" + draw(st.text(max_size=20)), ("GET",)
    method = draw(st.one_of(st.sampled_from(methods), st.sampled_from(METHODS)))
    values = {name: draw(param_values(h, name)) for name, _ in PARAM.findall(template)}
    path = fill(template, values) if values else quote(template, safe="/%")
    extra = draw(headers())
    if path.startswith("/admin") and h.csrf and draw(st.booleans()):
        extra["x-csrf-token"] = h.csrf  # past the CSRF check, into the handlers
    body = draw(raw_bodies(_keys_for(template))) if method not in ("GET", "HEAD") or draw(st.booleans()) else None
    return Sent(method, path, draw(query_params()), body, extra)


@fuzz_settings(160)
@given(data=st.data())
def test_any_route_any_method_any_input(gw: Harness, data: st.DataObject) -> None:
    sent = data.draw(any_request(gw))
    gw.run(exchange, gw, sent)


JSON_ROUTES = [("POST", p) for p in ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show",
                                     "/api/pull", "/api/push", "/api/create", "/api/copy")] + [("DELETE", "/api/delete")]
OPENAI_ROUTES = [("POST", p) for p in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")]


@fuzz_settings(120)
@given(route=st.sampled_from(JSON_ROUTES), data=st.data())
def test_ollama_json_endpoints(gw: Harness, route: tuple[str, str], data: st.DataObject) -> None:
    method, path = route
    body = data.draw(st.one_of(objects(ROUTE_KEYS[path]).map(_dumps), raw_bodies(ROUTE_KEYS[path])))
    sent = Sent(method, path, body=body, headers={"content-type": "application/json"})
    response = gw.run(exchange, gw, sent)
    check_lone_surrogate_refused(sent, response)
    if response.status_code == 200 and path == "/api/chat" and body:
        # a streamed answer is well-formed NDJSON to its last line
        if response.headers.get("content-type", "").startswith("application/x-ndjson"):
            lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
            assert lines and (lines[-1].get("done") or "error" in lines[-1])


@fuzz_settings(60)
@given(route=st.sampled_from(OPENAI_ROUTES), data=st.data())
def test_openai_endpoints(gw: Harness, route: tuple[str, str], data: st.DataObject) -> None:
    method, path = route
    body = data.draw(st.one_of(objects(ROUTE_KEYS[path]).map(_dumps), raw_bodies(ROUTE_KEYS[path])))
    sent = Sent(method, path, body=body, headers={"content-type": "application/json"})
    check_lone_surrogate_refused(sent, gw.run(exchange, gw, sent))


@st.composite
def rag_request(draw, h: Harness) -> Sent:
    kind = draw(st.sampled_from(["query", "query", "merge", "relations", "entity", "documents", "delete", "retry"]))
    if kind == "query":
        return Sent("POST", "/rag/query", body=draw(raw_bodies(ROUTE_KEYS["/rag/query"])))
    if kind == "merge":
        return Sent("POST", "/rag/merge", body=draw(raw_bodies(ROUTE_KEYS["/rag/merge"])))
    if kind == "relations":
        method = draw(st.sampled_from(["PATCH", "DELETE"]))
        return Sent(method, "/rag/relations", body=draw(raw_bodies(ROUTE_KEYS["/rag/relations"])))
    if kind == "entity":
        method = draw(st.sampled_from(["GET", "PATCH", "DELETE"]))
        name = draw(param_values(h, "name"))
        return Sent(method, "/rag/entities/" + quote(name, safe="/"),
                    body=draw(raw_bodies(ROUTE_KEYS["/rag/entities"])) if method == "PATCH" else None)
    if kind == "documents":
        return Sent("POST", "/rag/documents", body=draw(raw_bodies(ROUTE_KEYS["/rag/documents"])),
                    headers={"content-type": draw(st.sampled_from(["application/json", "text/plain",
                                                                   "multipart/form-data; boundary=zz"]))})
    doc = quote(draw(param_values(h, "id")), safe="")
    return Sent("DELETE" if kind == "delete" else "POST",
                f"/rag/documents/{doc}" + ("/retry" if kind == "retry" else ""))


@fuzz_settings(120)
@given(data=st.data())
def test_rag_endpoints(gw: Harness, data: st.DataObject) -> None:
    sent = data.draw(rag_request(gw))
    response = gw.run(exchange, gw, sent)
    check_lone_surrogate_refused(sent, response)
    if sent.path == "/rag/query" and response.status_code == 200:
        result = response.json()
        assert isinstance(result["context"], str) and isinstance(result["entities"], list)


# ------------------------------------------------- upstream replies of the wrong shape (issue 16 item 9)

# where the fake answers 200 with JSON of the wrong shape: a path (every call to it) or a model name
SHAPE_TARGETS = ["/api/chat", "/api/embed", "/api/show", "/api/tags", "llama3.2:latest", "nomic-embed-text"]
wrong_shapes = st.one_of(
    st.sampled_from([[1, 2, 3], {"message": 5}, {"message": {"content": 5}}, {"message": None}, {"embeddings": "x"},
                     {"embeddings": 5}, {"embeddings": [1.0, 2.0]}, {"embeddings": [[1.0], None]}, {"models": 5},
                     {"models": [5, {"name": 5}]}, {"capabilities": 5}, {"model_info": [1]}, "x", None, {}]),
    json_values)


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with started(fuzz_app_settings(tmp_path_factory.mktemp("fuzz-shapes") / "data")) as harness:
        yield harness


async def _shaped_exchange(h: Harness, kind: str, n: int) -> None:
    """One request of GraphGate's that makes it call the upstream itself, under a wrong-shape reply:
    never a 500 nor an "internal error"; a 5xx is a readable 502/504; a document fails readably."""
    await quiesce(h)
    with anyio.fail_after(EXAMPLE_TIMEOUT):
        if kind == "query":
            response = await h.client.post("/rag/query", json={"query": "Who works at Acme Corp?", "answer": True})
        elif kind == "chat":
            response = await h.client.post("/api/chat", json={"model": "llama3.2", "stream": False, "messages": [
                {"role": "user", "content": "Who works at Acme Corp?"}]})
        else:
            response = await h.client.post("/rag/documents", json={"name": f"shape-{n}.txt",
                                                                   "text": f"Dana Grey {n} works at Acme Corp."})
    assert response.status_code != 500 and "internal error" not in response.text, response.text[:300]
    if response.status_code > 500:
        assert response.status_code in (502, 504) and "upstream" in response.json()["error"], response.text[:300]
    if kind == "upload" and response.status_code == 202:
        doc_id = response.json()["documents"][0]["id"]
        await quiesce(h)
        document = (await h.client.get(f"/rag/documents/{doc_id}")).json()
        assert document["status"] in ("processed", "failed"), document
        assert "internal error" not in (document.get("error") or ""), document["error"]
        assert (await h.client.delete(f"/rag/documents/{doc_id}")).status_code == 200
        await quiesce(h)


@fuzz_settings(60)
@given(target=st.sampled_from(SHAPE_TARGETS), shape=wrong_shapes, kind=st.sampled_from(["query", "chat", "upload"]),
       n=st.integers(0, 10**6))
def test_upstream_replies_of_the_wrong_shape(shaped: Harness, target: str, shape: Any, kind: str, n: int) -> None:
    shaped.fake.wrong_shapes[target] = shape
    try:
        shaped.run(_shaped_exchange, shaped, kind, n)
    finally:
        shaped.fake.wrong_shapes.clear()
        shaped.fake.requests.clear()


# ------------------------------------------------------------- pathological inputs, one by one

PATHOLOGICAL = {
    "deep array": b"[" * 100_000 + b"]" * 100_000,
    "deep object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "deep in options": _deep(20_000, "options"),
    "deep just under the limit": _deep(900, "options"),
    "huge integer": b'{"model":"llama3.2","num_ctx":1' + b"0" * 5000 + b"}",
    "huge float": b'{"model":"llama3.2","num_ctx":1e999999}',
    "NaN": b'{"model":"llama3.2","options":{"num_ctx":NaN},"messages":[{"role":"user","content":"Berlin?"}]}',
    "lone surrogate": b'{"model":"llama3.2","messages":[{"role":"user","content":"\\udc00 Berlin"}]}',
    "invalid UTF-8": b'{"model":"llama3.2","messages":[{"role":"user","content":"\xff\xfe"}]}',
    "UTF-16": '{"model":"llama3.2"}'.encode("utf-16"),
    "BOM": b'\xef\xbb\xbf{"model":"llama3.2"}',
    "NUL": b'{"model":"llama3.2\x00"}',
    "messages not a list": b'{"model":"llama3.2","messages":{"role":"user"}}',
    "message not an object": b'{"model":"llama3.2","messages":[1, "two", null]}',
    "content an object": b'{"model":"llama3.2","messages":[{"role":"user","content":{"a":1}}]}',
    "role not a string": b'{"model":"llama3.2","messages":[{"role":["user"],"content":"Berlin?"}]}',
    "parts with junk": b'{"model":"llama3.2","messages":[{"role":"user","content":[1,{"type":"text","text":5}]}]}',
    "options a list": b'{"model":"llama3.2","options":[1],"messages":[{"role":"user","content":"Berlin?"}]}',
    "num_ctx a string": b'{"model":"llama3.2","options":{"num_ctx":"4096"},"messages":[{"role":"user","content":"Berlin?"}]}',
    "num_ctx negative": b'{"model":"llama3.2","options":{"num_ctx":-1},"messages":[{"role":"user","content":"Berlin?"}]}',
    "stream a string": b'{"model":"llama3.2","stream":"no","messages":[{"role":"user","content":"Berlin?"}]}',
    "model with a space": b'{"model":" ","messages":[]}',
}
PATHOLOGICAL_ROUTES = [("POST", "/api/chat"), ("POST", "/api/generate"), ("POST", "/api/embed"), ("POST", "/api/show"),
                       ("POST", "/v1/chat/completions"), ("POST", "/rag/query"), ("POST", "/rag/documents"),
                       ("POST", "/rag/merge"), ("PATCH", "/rag/relations"), ("PATCH", "/rag/entities/Berlin")]


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_bodies_on_every_json_route(gw: Harness, name: str) -> None:
    for method, path in PATHOLOGICAL_ROUTES:
        gw.run(exchange, gw, Sent(method, path, body=PATHOLOGICAL[name], headers={"content-type": "application/json"}))


def test_every_route_is_covered(gw: Harness) -> None:
    """The fuzzed route table is the app's: a new route is fuzzed without touching this file."""
    routes = dict(app_routes(gw.app))
    for path in ("/api/chat", "/v1/chat/completions", "/rag/query", "/rag/entities/{name:path}", "/admin/chats/{id}",
                 "/admin/static/{path:path}", "/admin/static/htmx/{path:path}", "/admin/cache/{kind}/{key}/delete"):
        assert path in routes, path
    assert len(routes) >= 60
    unfilled = {name for template in routes for name, _ in PARAM.findall(template)} - {
        "id", "name", "ref", "key", "kind", "token", "digest", "model", "path"}
    assert not unfilled, f"add values for these path parameters to param_values: {unfilled}"


def test_harness_detects_a_change(gw: Harness) -> None:
    """The 'nothing changed' check is not vacuous: an accepted write shows in the snapshot."""
    async def body() -> None:
        before = await snapshot(gw)
        response = await gw.client.post("/rag/documents", json={"name": "probe.txt", "text": "Berlin is big."})
        assert response.status_code == 202
        await quiesce(gw)
        assert await snapshot(gw) != before
        await gw.client.delete(f"/rag/documents/{response.json()['documents'][0]['id']}")
        await quiesce(gw)
        gw.last_snapshot = None

    gw.run(body)


__all__ = ["Harness", "Sent", "app_routes", "exchange", "fuzz_app_settings", "fuzz_settings", "quiesce", "snapshot",
           "started"]
