"""``..`` in every path parameter, over real sockets (issue 29 item 3), and deep JSON over a real socket.

GraphGate runs on uvicorn with ``GRAPHGATE_UPSTREAM`` naming a path, ``http://127.0.0.1:<port>/ollama``:
the fake upstream sits behind that prefix, and the server in front of it records every request's
path as it arrived on its socket. Every route of the app's route table with a path parameter gets,
in each parameter in turn, a traversal: literal (``../..``), percent-encoded (``%2e%2e%2f``, escaped
twice), with backslashes (``..\\..``, ``..%5c``), mixed. The client writes the path as it is (no client
normalises it away: ``http.client``, one connection per request).

- nothing reaches the upstream outside its prefix, nor with a ``.`` or ``..`` segment however it is
  spelt (decoded up to three times, a backslash read as a slash: what a server or proxy in front of
  the upstream could resolve);
- never a 5xx, never a dropped connection; no file outside the console's static folder is served.

A knowledge model whose base model is itself a traversal is tried too (its name becomes a path upstream).
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from proxy.app import create_app
from tests.fake_ollama import FakeOllama
from tests.fuzz_harness import PARAM, app_routes, fill, fuzz_app_settings, fuzz_settings
from tests.fuzz_values import deep, deep_object
from tests.live import serve_in_thread

ADMIN_KEY = "fuzz-paths-admin-key"
PREFIX = "/ollama"
SECRET_PATH = "internal/secret"
TRAVERSALS = [
    "..", "../..", "../../../../" + SECRET_PATH, "x/../../../../" + SECRET_PATH, "./../" + SECRET_PATH, ".",
    "%2e%2e", "%2e%2e%2f%2e%2e%2f%2e%2e%2f" + SECRET_PATH.replace("/", "%2f"), "..%2f..%2f..%2f" + SECRET_PATH,
    "%2e%2e/%2e%2e/%2e%2e/" + SECRET_PATH, ".%2e/.%2e/" + SECRET_PATH, "%2E%2E%2F%2E%2E%2F" + SECRET_PATH,
    "%252e%252e%252f%252e%252e%252f" + SECRET_PATH, "..\\..\\..\\" + SECRET_PATH.replace("/", "\\"),
    "..%5c..%5c..%5c" + SECRET_PATH, "%2e%2e%5c%2e%2e%5c" + SECRET_PATH, "....//....//" + SECRET_PATH,
    "llama3.2/../../../" + SECRET_PATH, "..;/..;/" + SECRET_PATH,
]
PLAIN = {"id": "doc-nope", "name": "Berlin", "ref": "x", "key": "x", "kind": "keywords", "token": "x",
         "digest": "sha256:" + "0" * 64, "model": "llama3.2", "alias": "trav-bot", "path": "console.css"}
# what a file outside the console's static folder would show
OUTSIDE_FILES = (b"[project]", b"root:x:0:0")
_SEPARATORS = re.compile(r"[/\\]")


# ------------------------------------------------------------------------- the prefixed upstream

class PrefixedUpstream:
    """The fake upstream under ``PREFIX``, recording every request's path as it came off the socket;
    anything outside the prefix is answered 404 (and recorded)."""

    def __init__(self, fake: FakeOllama) -> None:
        self.fake = fake
        self.seen: list[tuple[str, str, str]] = []  # method, raw path, decoded path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.fake.app(scope, receive, send)
        raw: bytes = scope.get("raw_path") or scope["path"].encode()
        self.seen.append((scope["method"], raw.decode("latin-1"), scope["path"]))
        if scope["path"].startswith(PREFIX + "/"):
            inner = dict(scope, path=scope["path"][len(PREFIX):], raw_path=raw[len(PREFIX):], root_path="")
            return await self.fake.app(inner, receive, send)
        await PlainTextResponse("404 page not found (outside the prefix)", 404)(scope, receive, send)


def leaves_the_prefix(raw: str, decoded: str) -> str | None:
    """Why a path that reached the upstream could take a request above its prefix, or None."""
    if not decoded.startswith(PREFIX + "/"):
        return f"outside {PREFIX}"
    for text in (raw, decoded):
        for _ in range(3):
            if any(segment in (".", "..") for segment in _SEPARATORS.split(text)):
                return "a '.' or '..' segment"
            plain = unquote(text)
            if plain == text:
                break
            text = plain
    return None


# ------------------------------------------------------------------------------------ the world

@dataclass
class Live:
    url: str
    upstream: PrefixedUpstream
    routes: list[tuple[str, str]]      # (method, template)
    aliases: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 80


@dataclass
class Answer:
    status: int
    body: bytes


def send(live: Live, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> Answer:
    """One request, the path written as it is, on a connection of its own; a dropped connection fails."""
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        sent = {"authorization": f"Bearer {ADMIN_KEY}", "connection": "close", **(headers or {})}
        if body is not None:
            sent.setdefault("content-type", "application/json")
            sent["content-length"] = str(len(body))
        for name, value in sent.items():
            connection.putheader(name, value.encode("latin-1", "replace"))
        connection.endheaders(body)
        try:
            response = connection.getresponse()
            return Answer(response.status, response.read())
        except (http.client.HTTPException, ConnectionError) as exc:
            raise AssertionError(f"{method} {path}: the connection was dropped ({type(exc).__name__}: {exc})") from None
    finally:
        connection.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    fake = FakeOllama()
    upstream = PrefixedUpstream(fake)
    with serve_in_thread(upstream, lifespan="off") as upstream_url:
        settings = fuzz_app_settings(tmp_path_factory.mktemp("fuzz-paths") / "data", upstream=upstream_url + PREFIX,
                                     api_key=ADMIN_KEY)
        app = create_app(settings)
        routes = [(method, template) for template, methods in app_routes(app) for method in methods
                  if PARAM.search(template)]
        with serve_in_thread(app) as url:
            world = Live(url, upstream, routes)
            assert send(world, "PUT", "/rag/models/trav-bot", b'{"model": "llama3.2"}').status == 201
            for n, base in enumerate(("../../../../" + SECRET_PATH, "..%2f..%2f" + SECRET_PATH, "..\\..\\x")):
                # a base model that is a traversal: refused, or (taken) tried below as an alias
                if send(world, "PUT", f"/rag/models/evil-{n}", json.dumps({"model": base}).encode()).status < 300:
                    world.aliases.append(f"evil-{n}")
            check_upstream(world, "setting up")
            yield world


def check_upstream(live: Live, where: str) -> None:
    seen, live.upstream.seen[:] = list(live.upstream.seen), []
    for method, raw, decoded in seen:
        why = leaves_the_prefix(raw, decoded)
        assert why is None, f"{where}: the upstream received {method} {raw!r} ({why})"


def body_for(method: str, template: str) -> bytes | None:
    if method in ("GET", "HEAD", "DELETE", "OPTIONS"):
        return None
    if template.startswith("/api/blobs/"):
        return b"blob"
    if template.startswith("/admin"):
        return b""
    return json.dumps({"model": "llama3.2", "description": "x", "metadata": {"k": "v"}}).encode()


def check_answer(live: Live, method: str, path: str, answer: Answer) -> None:
    where = f"{method} {path}"
    assert answer.status < 500, f"{where} -> {answer.status}: {answer.body[:300]!r}"
    if method != "HEAD":
        for marker in OUTSIDE_FILES:
            assert marker not in answer.body, f"{where} served a file from outside: {answer.body[:300]!r}"
    check_upstream(live, where)


def try_path(live: Live, method: str, template: str, param: str, value: str) -> None:
    values = {name: (value if name == param else PLAIN.get(name, "x")) for name, _ in PARAM.findall(template)}
    path = fill(template, values, encode=False)
    check_answer(live, method, path, send(live, method, path, body_for(method, template)))


# ------------------------------------------------------------------------------------------ tests


def test_every_path_parameter_of_every_route_with_every_traversal(live: Live) -> None:
    assert {("GET", "/v1/models/{model:path}"), ("POST", "/api/blobs/{digest}"),
            ("GET", "/admin/static/{path:path}")} <= set(live.routes), live.routes
    for method, template in live.routes:
        for param, _ in PARAM.findall(template):
            for value in TRAVERSALS:
                try_path(live, method, template, param, value)


def test_a_knowledge_model_whose_base_model_is_a_traversal_stays_under_the_prefix(live: Live) -> None:
    """A base model's name goes into the upstream's path (/v1/models/{model}): a traversal there is
    refused when the model is made, or stays under the prefix when it is used."""
    for alias in live.aliases:
        for method, path, body in (("GET", f"/v1/models/{alias}", None), ("POST", "/api/show", {"model": alias}),
                                   ("POST", "/api/chat", {"model": alias, "stream": False,
                                                          "messages": [{"role": "user", "content": "hi"}]}),
                                   ("GET", "/api/tags", None), ("GET", "/v1/models", None)):
            answer = send(live, method, path, None if body is None else json.dumps(body).encode())
            check_answer(live, method, f"{path} {body or ''}", answer)


PIECES = ["..", ".", "%2e%2e", "%2E%2e", "%252e%252e", ".%2e", "%2e.", "x", "llama3.2", "%2f", "%5c", "\\", ";",
          "%00", "~", "internal", "secret"]
traversal_paths = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).flatmap(
    lambda pieces: st.lists(st.sampled_from(["/", "\\", "%2f", "%5c"]), min_size=len(pieces), max_size=len(pieces))
    .map(lambda seps: "".join(p + s for p, s in zip(pieces, seps, strict=True))))


@fuzz_settings(40)
@given(data=st.data(), value=traversal_paths)
def test_random_traversals_in_any_path_parameter(live: Live, data: st.DataObject, value: str) -> None:
    method, template = data.draw(st.sampled_from(live.routes))
    param = data.draw(st.sampled_from([name for name, _ in PARAM.findall(template)]))
    try_path(live, method, template, param, value)


# -------------------------------------------------------------------- deep JSON on a real socket

def test_deep_json_over_a_real_socket_is_a_4xx_never_a_dropped_connection(live: Live) -> None:
    """The issue's reproductions as they were run: over a socket, a deep filter (header, prefix,
    query), deep metadata and a deep body answer 4xx; the connection is never dropped."""
    question = "Who works at Acme Corp?"
    for depth in (1000, 3000):
        for nesting in ("[", "{"):
            raw = deep(depth, nesting)
            prefix = "/" + deep_object(depth, nesting) + " "
            for path, body, headers in (
                    ("/api/chat", {"model": "llama3.2", "stream": False,
                                   "messages": [{"role": "user", "content": question}]}, {"x-graphgate-filter": raw}),
                    ("/api/chat", {"model": "llama3.2", "stream": True,
                                   "messages": [{"role": "user", "content": prefix + question}]}, {}),
                    ("/v1/chat/completions", {"model": "llama3.2", "stream": True,
                                              "messages": [{"role": "user", "content": prefix + question}]}, {}),
                    ("/v1/chat/completions", {"model": "llama3.2", "messages": [{"role": "user", "content": question}]},
                     {"x-graphgate-filter": raw}),
                    ("/rag/query", {"query": question, "filters": json.loads(deep_object(min(depth, 500), nesting))},
                     {})):
                answer = send(live, "POST", path, json.dumps(body).encode(), headers)
                assert 400 <= answer.status < 500, (path, depth, nesting, answer.status, answer.body[:300])
            for path in ("/rag/documents?filter=", "/admin/documents?filter="):
                answer = send(live, "GET", path + raw.replace("{", "%7B").replace("}", "%7D").replace('"', "%22"))
                assert 400 <= answer.status < 500, (path, depth, nesting, answer.status, answer.body[:300])
            answer = send(live, "POST", "/rag/documents", b"[" * depth * 10 + b"]" * depth * 10)
            assert 400 <= answer.status < 500, ("body", depth, answer.status, answer.body[:300])
    check_upstream(live, "deep JSON")


def test_the_fixture_is_what_it_claims(live: Live) -> None:
    """The checks can fail: a path with a traversal, sent by hand to the upstream, is caught."""
    assert leaves_the_prefix("/ollama/v1/models/../../x", "/ollama/v1/models/../../x")
    assert leaves_the_prefix("/internal/secret", "/internal/secret")
    assert leaves_the_prefix("/ollama/api/%252e%252e/x", "/ollama/api/%2e%2e/x")
    assert leaves_the_prefix("/ollama/api/..%5cx", "/ollama/api/..\\x")
    assert leaves_the_prefix("/ollama/api/tags", "/ollama/api/tags") is None
    static = send(live, "GET", "/admin/static/console.css")
    assert static.status == 200 and static.body, static.status
    assert OUTSIDE_FILES[0] in (Path(__file__).resolve().parents[1] / "pyproject.toml").read_bytes()
