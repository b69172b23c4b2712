"""The fuzzers' harness: the real app in-process over the fake upstream, run in a background event
loop (an anyio blocking portal), seeded with the test corpus; ``exchange`` sends one request and
checks what tests/test_fuzz_api.py promises about every answer (no 5xx of GraphGate's making, no
hang, the surface's error shape, the Host split, a rejected request changes nothing, none of
GraphGate's own headers nor its credentials reach the upstream). ``app_routes`` is the app's own
route table, which every fuzzer walks (a route added later is fuzzed without a change here)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import faulthandler
import functools
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import httpx
from hypothesis import HealthCheck, settings
from starlette.routing import Mount, Route

from proxy.app import Settings, create_app
from proxy.store.store import INDEXED_TABLES
from tests.conftest import NOMINAL_UPSTREAM, running
from tests.console_helpers import csrf_of
from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama

# ------------------------------------------------------------------------------------ profiles

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLE_TIMEOUT = 15.0  # seconds a request may take before it counts as a hang
HUNG_SECONDS = 180.0  # seconds one harness call may take (several requests, a quiesce) before the run stops

settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("long", deadline=None, print_blob=True)


def fuzz_settings(examples: int) -> settings:
    """CI: ``examples`` derandomised examples; HYPOTHESIS_PROFILE=long: 25 times as many, random."""
    return settings(settings.get_profile("long" if LONG else "ci"), max_examples=examples * (25 if LONG else 1),
                    suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------------- the routes


@functools.cache
def app_routes(app) -> list[tuple[str, tuple[str, ...]]]:
    """(path template, methods) of every route, Mount children included; a mounted app (static
    files) as ``{path:path}`` under its prefix; a route that names no methods (an ASGI endpoint such
    as /mcp) as answering every method."""
    out: list[tuple[str, tuple[str, ...]]] = []

    def walk(routes, prefix: str) -> None:
        for route in routes:
            if isinstance(route, Route):
                out.append((prefix + route.path, tuple(sorted(route.methods or {"DELETE", "GET", "POST"}))))
            elif isinstance(route, Mount):
                if route.routes:
                    walk(route.routes, prefix + route.path)
                else:
                    out.append((prefix + route.path + "/{path:path}", ("GET", "HEAD")))

    walk(app.routes, "")
    return out


PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")


def fill(template: str, values: dict[str, str], *, encode: bool = True) -> str:
    """The template with its parameters: percent-encoded (a ``:path`` one keeps its slashes), or as
    they are (``encode=False``: a traversal sent raw)."""
    def one(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        if not encode:
            return value
        return quote(value, safe="/") if match.group(2) == "path" else quote(value, safe="")

    return PARAM.sub(one, template)


# ------------------------------------------------------------------------------- the upstream


@dataclass
class UpstreamCall:
    method: str
    path: str
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)  # as sent to the upstream, names lower-cased


class RecordingTransport(httpx.AsyncBaseTransport):
    """The fake upstream in-process, answering as a real server would (an exception inside the
    fake becomes a 500, as uvicorn would send it), every request and answer recorded. ``rewrite``,
    when set, turns the fake's answer into another (``(path, body) -> body``): an upstream that
    answers what no test double would, deep nesting, say."""

    def __init__(self, fake: FakeOllama) -> None:
        self.inner = httpx.ASGITransport(app=fake.app, client=("127.0.0.1", 40000), raise_app_exceptions=False)
        self.calls: list[UpstreamCall] = []
        self.rewrite: Callable[[str, bytes], bytes] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        headers = httpx.Headers(response.headers)
        if self.rewrite is not None:
            body = self.rewrite(request.url.path, body)
            headers.pop("content-length", None)
        sent = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers.raw}
        self.calls.append(UpstreamCall(request.method, request.url.path, response.status_code, body, sent))
        return httpx.Response(response.status_code, headers=headers, stream=httpx.ByteStream(body),
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
    auth: dict[str, str] = field(default_factory=dict)  # the harness's own reads (snapshots) send these
    # more of what a request could change, read by the snapshot (other knowledge bases, the keys...)
    extra_state: Callable[[], Awaitable[dict[str, Any]]] | None = None

    @property
    def kb(self):
        return self.app.state.gateway.knowledge

    def run(self, fn, *args):
        """``fn(*args)`` in the app's event loop. A call still running after ``HUNG_SECONDS`` waits
        on a worker thread that will never return (anyio cannot cancel one: a read of a store closed
        under it, say), and so would the app's shutdown: the process stops, saying where, rather
        than hang the suite until the CI's own timeout."""
        future = self.portal.start_task_soon(fn, *args)
        try:
            return future.result(timeout=HUNG_SECONDS)
        except concurrent.futures.TimeoutError:
            _stop_the_run_a_thread_of_the_app_is_blocked_for_good(fn, args)

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return "Harness(...)"


def _stop_the_run_a_thread_of_the_app_is_blocked_for_good(fn: Any, args: tuple[Any, ...]) -> NoReturn:
    """Abort, so that the fault handler writes every thread's stack (the one blocked, and this very
    function's name) where it can be read: under pytest, to the stderr its capture leaves alone (a
    message of ours would be captured, and lost with the process)."""
    sys.stderr.write(f"\n{getattr(fn, '__name__', fn)}{args!r:.500} has not returned after {HUNG_SECONDS} s: "
                     "a thread of the app is blocked for good\n")
    if not faulthandler.is_enabled():
        faulthandler.enable()
    os.abort()


def fuzz_app_settings(data_dir: Path, **changes: Any) -> Settings:
    base = Settings.load(environ={"GRAPHGATE_UPSTREAM": NOMINAL_UPSTREAM, "GRAPHGATE_DATA_DIR": str(data_dir)})
    return base.replace(**{"max_body_bytes": 512 * 1024, "max_upload_bytes": 64 * 1024, "llm_retries": 1,
                           "gleaning": 0, "retrieval_timeout": 5.0, **changes})


@contextlib.contextmanager
def started(settings: Settings, *, seed: bool = True, client_host: str = "127.0.0.1") -> Iterator[Harness]:
    """The gateway over the fake upstream, running in a background event loop, seeded with two
    processed documents (six entities) unless ``seed`` is false (``seed_documents`` seeds later)."""
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
    kb.traces.writer.max_delay = kb.cache.writer.max_delay = 0.0
    if seed:
        await seed_documents(h)
    page = await h.client.get("/admin/")
    if page.status_code == 200:
        h.csrf = csrf_of(page.text)


async def seed_documents(h: Harness) -> None:
    """Two processed documents (six entities) in the default base, sent with ``h.auth``."""
    for name, text in (("team.txt", TEAM), ("city.md", CITY)):
        response = await h.client.post("/rag/documents", json={"name": name, "text": text}, headers=h.auth)
        assert response.status_code == 202, response.text
        h.documents.append(response.json()["documents"][0]["id"])
    await quiesce(h)
    h.entity_keys = await h.kb.store.tables.db.read(
        lambda con: [r[0] for r in con.execute("SELECT name_key FROM entities ORDER BY 1").fetchall()])
    assert len(h.entity_keys) == len(PEOPLE)


def check_alive(h: Harness) -> None:
    """The default base's service still runs: a background task of its that failed (a turn's late
    keyword call, say) cancels its task group and closes the store, and a read of a closed store
    waits for ever: fail here, at once, rather than hang."""
    kb = h.kb
    if kb is not None and kb.group.cancel_scope.cancel_called:
        raise AssertionError("the knowledge service has stopped: one of its background tasks failed (its error "
                             "is in the log); every later read of its store would wait for ever")


async def quiesce(h: Harness) -> None:
    """Wait until the pipeline of every open knowledge base is idle and every queued trace or cache
    write is committed."""
    if h.kb is None:
        return
    check_alive(h)
    bases = h.app.state.gateway.bases
    with anyio.fail_after(30):
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # let tasks just started by the request queue their writes
        for _, kb in bases.open_services() if bases is not None else [("default", h.kb)]:
            if kb is None or kb.group.cancel_scope.cancel_called:
                continue  # (the default base's death is check_alive's; another's closing is no work left)
            await kb.documents.wait_idle()
            while kb.traces.writer._pending or kb.cache.writer._pending:
                await anyio.sleep(0.002)
            await kb.store.tables.db.write(lambda con: None)  # behind the write lock: a commit under way is done
    check_alive(h)


async def settled_then_removed(h: Harness, doc_id: str) -> None:
    """A document the fuzzer got accepted ends processed or failed with a readable reason (never an
    internal error), and is removed again so that the next example starts from the same store."""
    await quiesce(h)
    document = (await h.client.get(f"/rag/documents/{doc_id}")).json()
    assert document["status"] in ("processed", "failed"), document
    assert "internal error" not in (document.get("error") or ""), document["error"]
    assert (await h.client.delete(f"/rag/documents/{doc_id}")).status_code == 200
    await quiesce(h)


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
        state["tables"] = await kb.store.tables.db.read(_tables)

    async def stats() -> None:
        state["stats"] = (await h.client.get("/rag/stats", headers=h.auth)).json()
        state["stats"].pop("bytes_on_disk", None)

    async def extra() -> None:
        if h.extra_state is not None:
            state["extra"] = await h.extra_state()

    async with anyio.create_task_group() as group:  # reader threads at once
        group.start_soon(tables)
        group.start_soon(stats)
        group.start_soon(extra)
    state["graph"] = await anyio.to_thread.run_sync(
        kb.store.read_memory_sync, lambda rows, graph: (graph.vertex_count, graph.edge_count))
    state["indexes"] = {name: kb.store.vector_count(name) for name in INDEXED_TABLES}
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
    if path == "/mcp":
        return "mcp"
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
    if surface == "mcp":  # MCP clients read a JSON-RPC error; the gateway's own guards answer {"error": "..."}
        assert isinstance(error, str) and error or isinstance(error, dict) and isinstance(error.get("message"), str) \
            and error["message"], (sent, body)
        return
    if surface == "openai":
        assert isinstance(error, dict), (sent, body)
        assert isinstance(error.get("message"), str) and error["message"], (sent, body)
        assert error.get("type") in ("invalid_request_error", "not_found_error"), (sent, body)
        assert "param" in error and "code" in error, (sent, body)
    else:
        assert isinstance(error, str) and error, (sent, body)


async def exchange(h: Harness, sent: Sent, *, check_unchanged: bool = True,
                   refused: Callable[[httpx.Response], bool] | None = None) -> httpx.Response:
    """Send one request and check everything the module promises about its answer. ``refused``
    says which answers other than a 4xx are refusals too (an MCP tool error is a 200): they must
    change nothing either."""
    await quiesce(h)
    before = (h.last_snapshot or await snapshot(h)) if check_unchanged else None
    h.last_snapshot = None
    mark = len(h.upstream.calls)
    with anyio.fail_after(EXAMPLE_TIMEOUT):
        response = await h.client.request(sent.method, sent.url, content=sent.body,
                                          headers={k.encode(): v.encode() for k, v in sent.headers.items()})
        await response.aread()
    # the upstream's models are the fake's state, not GraphGate's: put them back for the next example
    # (first: a failed check below must not leave them to the next example's "before")
    h.fake.models = copy.deepcopy(h.models)
    h.fake.loaded = {"llama3.2:latest"}
    h.fake.blobs.clear()
    h.fake.requests.clear()
    calls = h.upstream.calls[mark:]
    del h.upstream.calls[:]
    check_host_split(sent, response)
    check_upstream_headers(h, sent, calls)
    path = response.request.url.path
    forwarded = [c for c in calls if c.path == path]
    status = response.status_code
    if status >= 500:
        relayed = forwarded and forwarded[-1].status == status and forwarded[-1].body == response.content
        assert relayed, f"{sent!r} -> {status}: {response.text[:500]}"
    relayed = False
    if 400 <= status < 500:
        if forwarded and forwarded[-1].status == status and _surface(path) in ("ollama", "openai"):
            assert forwarded[-1].body == response.content, (sent, response.text[:300])  # relayed as it was
            relayed = True
        else:
            check_error_shape(sent, response)
    if status < 300:
        check_complete(sent, response, calls)
    if before is not None and (400 <= status < 500 or refused is not None and refused(response)):
        await quiesce(h)
        after = await snapshot(h)
        h.last_snapshot = after
        if relayed or calls or status < 400:  # the upstream was asked, or a read answered: a turn may be traced
            assert _without_volatile(after) == _without_volatile(before), f"{sent!r} -> {status} changed the store"
        else:
            assert after == before, f"{sent!r} -> {status} changed the store"
    return response


def check_complete(sent: Sent, response: httpx.Response, calls: list[UpstreamCall]) -> None:
    """A streamed chat answer ends as its protocol ends it (a last NDJSON line that is done or an
    error, an SSE stream's ``[DONE]`` or error), or as the upstream's own stream ended (relayed as it
    was sent): a stream cut short is a failure in the middle of it, which in-process shows as
    nothing else. Read by substrings: a line may be too deep to parse."""
    path = response.request.url.path
    kind = response.headers.get("content-type", "")
    if sent.method == "HEAD" or path not in ("/api/chat", "/api/generate", "/v1/chat/completions", "/v1/completions"):
        return
    lines = [line for line in response.content.split(b"\n") if line.strip()]
    last = lines[-1] if lines else b""
    if any(last and last in call.body.split(b"\n") for call in calls):
        return  # the upstream's last line, relayed
    if kind.startswith("application/x-ndjson"):
        assert b'"done":true' in last.replace(b" ", b"") or b'"error"' in last, \
            f"{sent!r}: the stream ended without its last line: {response.content[-300:]!r}"
    elif kind.startswith("text/event-stream"):
        assert last.strip() == b"data: [DONE]" or b'"error"' in last, \
            f"{sent!r}: the stream ended without [DONE]: {response.content[-300:]!r}"


GATEWAY_HEADERS = ("x-graphgate-", "x-task", "x-csrf-token")  # GraphGate's own: never the upstream's business


def check_upstream_headers(h: Harness, sent: Sent, calls: list[UpstreamCall]) -> None:
    """What went upstream carries none of GraphGate's own headers and none of its credentials: the
    API key, a stored key's token (``gg_...``), a console cookie (issue 29 item 2)."""
    credentials = [value for value in (h.settings.api_key,) if value]
    for call in calls:
        own = [name for name in call.headers if name.startswith(GATEWAY_HEADERS)]
        assert not own, f"{sent!r}: {call.method} {call.path} went upstream with GraphGate's headers {own}"
        authorization = call.headers.get("authorization", "")
        leaked = "gg_" in authorization or any(c in authorization for c in credentials) or "cookie" in call.headers
        assert not leaked, f"{sent!r}: {call.method} {call.path} went upstream with a gateway credential"


# ----------------------------------------------------------------------------- the Host split

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
