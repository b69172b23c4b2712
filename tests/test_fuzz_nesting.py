"""Deep JSON nesting in every JSON-bearing field and header (issue 29 items 5, 8 and 10's kin).

``[[[...]]]`` and ``{"a":{"a":...}}`` at depths either side of Python's recursion limit (100 to
100,000, tests/fuzz_values.py) wherever GraphGate reads JSON:

- the body of every JSON route of the app's route table (/api/*, /v1/*, /rag/*) and every argument
  of every MCP tool (the tools as ``tools/list`` names them), one field at a time and whole;
- the ``X-GraphGate-Filter`` header and the chat prefix ``/{...} q`` (/api/chat, /api/generate, /v1);
- ``?filter=`` query strings, multipart ``metadata`` (API and console), every console form field
  (the forms as the console's own pages render them: a form added later is fuzzed too);
- the upstream's replies: every JSON object the fake upstream answers gets a deep field, or is
  replaced by deep JSON, under every request that makes GraphGate read one.

Every answer is GraphGate's clear 4xx (or 502 naming the upstream for an upstream's bad reply),
never a 5xx of its making nor a stream cut short; a refused request changes nothing (checked by
``tests.fuzz_harness.exchange``). Where the field only takes a flat object (a filter, metadata,
a model's options), the answer is a refusal at every depth.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from admin.rendering import ref
from tests.fuzz_harness import (
    EXAMPLE_TIMEOUT,
    PARAM,
    Harness,
    Sent,
    app_routes,
    check_alive,
    check_complete,
    exchange,
    fill,
    fuzz_app_settings,
    fuzz_settings,
    quiesce,
    settled_then_removed,
    started,
)
from tests.fuzz_values import (
    DEPTHS,
    NESTINGS,
    deep,
    deep_content,
    deep_object,
    deep_reply,
    in_url,
    json_bytes,
    with_raw,
)

# the depths every named place is tried at, each nesting (the hypothesis tests draw from all DEPTHS)
SWEEP = [(depth, nesting) for depth in (100, 1000, 3000, 100_000) for nesting in ("[", "{")]
SWEEP_IDS = [f"{nesting}x{depth}" for depth, nesting in SWEEP]
JSON_TYPE = {"content-type": "application/json"}
QUESTION = "Who works at Acme Corp?"
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def nest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    # /api/generate is augmented too (GRAPHGATE_AUGMENT_GENERATE): its prompt's prefix is read
    with started(fuzz_app_settings(tmp_path_factory.mktemp("fuzz-nesting") / "data", augment_generate=True)) as harness:
        harness.run(_add_model, harness, "deep-bot")
        harness.tools = harness.run(_mcp_tools, harness)  # type: ignore[attr-defined]
        yield harness


async def _add_model(h: Harness, alias: str) -> None:
    response = await h.client.put(f"/rag/models/{alias}", json={"model": "llama3.2", "kb": "default"}, headers=h.auth)
    assert response.status_code in (200, 201), response.text


# ------------------------------------------------------------------------------------ MCP


def mcp_result(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of an MCP answer (JSON, or the one event of an SSE stream)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else ""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def mcp_refused(response: httpx.Response) -> bool:
    """A JSON-RPC error, or a tool's error (``isError``: a 200 carrying the refusal)."""
    message = mcp_result(response)
    if message is None:
        return response.status_code >= 400
    result = message.get("result")
    return "error" in message or isinstance(result, dict) and result.get("isError") is True


async def _mcp_tools(h: Harness) -> dict[str, dict[str, Any]]:
    """Every tool's input schema's properties, as the server lists them."""
    response = await h.client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                                   headers={**MCP_HEADERS, **h.auth})
    message = mcp_result(response)
    assert message is not None and "result" in message, response.text[:300]
    return {tool["name"]: tool["inputSchema"].get("properties", {}) for tool in message["result"]["tools"]}


def mcp_call(tool: str, arguments: bytes) -> bytes:
    return (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":' + json.dumps(tool).encode()
            + b',"arguments":' + arguments + b"}}")


MCP_VALID: dict[str, dict[str, Any]] = {
    "query": {"question": QUESTION}, "get_entities": {"query": "Acme"}, "get_relations": {"entity": "Acme Corp"},
    "insert": {"name": "deep.txt", "text": "Deep text about Berlin."},
    "batch_insert": {"documents": [{"name": "deep2.txt", "text": "More about Berlin."}]},
    "update": {"document_id": "doc-nope", "text": "x"}, "delete": {"document_id": "doc-nope"},
}


# ------------------------------------------------------------------------- JSON bodies, by route

def _valid_bodies(h: Harness) -> dict[tuple[str, str], dict[str, Any]]:
    """A body each JSON route takes (or nearly: the deep field is what it is refused for)."""
    chat = [{"role": "user", "content": QUESTION}]
    return {
        ("POST", "/api/show"): {"model": "llama3.2"},
        ("POST", "/api/chat"): {"model": "llama3.2", "messages": chat, "stream": False},
        ("POST", "/api/generate"): {"model": "llama3.2", "prompt": QUESTION, "stream": False},
        ("POST", "/api/embed"): {"model": "nomic-embed-text", "input": "Berlin"},
        ("POST", "/api/embeddings"): {"model": "nomic-embed-text", "prompt": "Berlin"},
        ("POST", "/api/pull"): {"model": "llama3.2", "stream": False},
        ("POST", "/api/push"): {"model": "llama3.2", "stream": False},
        ("POST", "/api/create"): {"model": "deep-made", "from": "llama3.2", "stream": False},
        ("POST", "/api/copy"): {"source": "llama3.2", "destination": "deep-copy"},
        ("DELETE", "/api/delete"): {"model": "deep-copy"},
        ("POST", "/v1/chat/completions"): {"model": "llama3.2", "messages": chat},
        ("POST", "/v1/completions"): {"model": "llama3.2", "prompt": QUESTION},
        ("POST", "/v1/embeddings"): {"model": "nomic-embed-text", "input": "Berlin"},
        ("POST", "/rag/documents"): {"name": "deep.txt", "text": "Deep text about Berlin.", "metadata": {"k": "v"}},
        ("PATCH", "/rag/documents/{id}"): {"metadata": {"k": "v"}},
        ("POST", "/rag/query"): {"query": QUESTION, "filters": {"k": "v"}, "history": chat},
        ("PATCH", "/rag/entities/{name:path}"): {"description": "A city.", "type": "Location"},
        ("PATCH", "/rag/relations"): {"source": "Alice Smith", "target": "Acme Corp", "description": "works"},
        ("DELETE", "/rag/relations"): {"source": "Nobody", "target": "Acme Corp"},
        ("POST", "/rag/merge"): {"entities": ["Berlin", "Bob Jones"], "target": "Berlin", "dry_run": True},
        ("POST", "/rag/kbs"): {"name": "deep-kb", "settings": {"chunk_tokens": 600}},
        ("PATCH", "/rag/kbs/{name}"): {"settings": {"chunk_tokens": 600}},
        ("PUT", "/rag/models/{alias:path}"): {"model": "llama3.2", "kb": "default", "options": {"temperature": 0.2}},
        ("POST", "/rag/keys"): {"name": "deep", "role": "read", "kbs": None},
    }


# fields that take a flat JSON object: a deep value there is refused at every depth
FLAT_FIELDS = ("filters", "metadata", "settings")
# a field no route knows: read (it must be parsed to be skipped), never used
EXTRA_FIELDS = ("filters", "metadata", "options", "format", "tools", "settings", "zz")
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def _param_value(h: Harness, template: str, name: str, method: str) -> str:
    """A path parameter that names something real (deleting it would spoil later examples: not for DELETE)."""
    real = method != "DELETE"
    if name == "id":
        return h.documents[0] if real and template.startswith("/rag/documents") else "doc-nope"
    if name == "name":
        return ("default" if real else "nope") if template.startswith("/rag/kbs") else "Berlin" if real else "Nobody"
    return {"alias": "deep-bot" if real else "nope-bot", "digest": "sha256:" + "0" * 64}.get(name, "x")


def json_routes(h: Harness) -> list[tuple[str, str]]:
    """(method, template) of every route that may read a JSON body: /api/*, /v1/*, /rag/* (not blob uploads)."""
    out: list[tuple[str, str]] = []
    for template, methods in app_routes(h.app):
        if template.startswith(("/api/", "/v1/", "/rag/")) and not template.startswith("/api/blobs/"):
            out.extend((method, template) for method in methods if method in BODY_METHODS)
    return out


def json_request(h: Harness, method: str, template: str, field: str | None, raw: str) -> Sent:
    """The route's valid body with ``field`` set to the deep JSON ``raw`` (``None``: the whole body is ``raw``)."""
    path = fill(template, {name: _param_value(h, template, name, method) for name, _ in PARAM.findall(template)})
    base = _valid_bodies(h).get((method, template), {})
    body = raw.encode() if field is None else with_raw(base, field, raw)
    return Sent(method, path, body=body, headers=dict(JSON_TYPE))


def fields_of(h: Harness, method: str, template: str) -> list[str]:
    return sorted({*_valid_bodies(h).get((method, template), {}), *EXTRA_FIELDS})


def _refused_if_flat(h: Harness, method: str, template: str, sent: Sent, response: httpx.Response,
                     field: str | None) -> None:
    """A field of the route's that takes a flat object: a clear refusal at any depth."""
    if field in FLAT_FIELDS and field in _valid_bodies(h).get((method, template), {}):
        assert 400 <= response.status_code < 500, (sent, response.status_code, response.text[:300])


def _cleanup(h: Harness) -> None:
    """A key made by an example would close the API for the next ones: revoke it (not under test here)."""
    async def revoke() -> None:
        keys = h.app.state.gateway.keys
        for key_id in list(keys.keys):
            await keys.revoke(key_id)

    h.run(revoke)
    h.last_snapshot = None


@fuzz_settings(60)
@given(data=st.data(), depth=st.sampled_from(DEPTHS), nesting=st.sampled_from(NESTINGS))
def test_deep_json_in_any_field_of_any_json_route(nest: Harness, data: st.DataObject, depth: int,
                                                   nesting: str) -> None:
    method, template = data.draw(st.sampled_from(json_routes(nest)))
    field = data.draw(st.one_of(st.none(), st.sampled_from(fields_of(nest, method, template))))
    raw = deep(depth, nesting)
    sent = json_request(nest, method, template, field, raw)
    try:
        response = nest.run(exchange, nest, sent)
        _refused_if_flat(nest, method, template, sent, response, field)
    finally:
        _cleanup(nest)


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_json_as_every_json_routes_body_and_flat_fields(nest: Harness, depth: int, nesting: str) -> None:
    """Every JSON route's whole body, and every flat-object field of those that take one."""
    raw = deep(depth, nesting)
    try:
        for method, template in json_routes(nest):
            valid = _valid_bodies(nest).get((method, template))
            fields: list[str | None] = [None] if depth >= 1000 else []  # (shallower whole bodies: any route's JSON)
            fields += [f for f in FLAT_FIELDS if f in (valid or {})]
            for field in fields:
                sent = json_request(nest, method, template, field, raw)
                response = nest.run(exchange, nest, sent)
                if field is None and valid is not None:  # a route that reads its body: refused
                    assert 400 <= response.status_code < 500, (sent, response.status_code, response.text[:300])
                _refused_if_flat(nest, method, template, sent, response, field)
    finally:
        _cleanup(nest)


# ------------------------------------------------------------------------------------ MCP tools


@fuzz_settings(30)
@given(data=st.data(), depth=st.sampled_from(DEPTHS), nesting=st.sampled_from(NESTINGS))
def test_deep_json_in_any_argument_of_any_mcp_tool(nest: Harness, data: st.DataObject, depth: int,
                                                    nesting: str) -> None:
    tools: dict[str, dict[str, Any]] = nest.tools  # type: ignore[attr-defined]
    tool = data.draw(st.sampled_from(sorted(tools)))
    if tool == "rebuild_index":  # rebuilds the live store: slow, and nothing of it reads JSON
        tool = "stats"
    argument = data.draw(st.one_of(st.none(), st.sampled_from(sorted(tools[tool]) or ["zz"])))
    raw = deep(depth, nesting)
    arguments = raw.encode() if argument is None else with_raw(MCP_VALID.get(tool, {}), argument, raw)
    sent = Sent("POST", "/mcp", body=mcp_call(tool, arguments), headers=dict(MCP_HEADERS))
    response = nest.run(functools.partial(exchange, refused=mcp_refused), nest, sent)
    # (a shallow object as the arguments is one unknown argument, which a tool may ignore)
    if argument in ("filters", "metadata") or argument is None and (depth >= 1000 or nesting == "["):
        assert mcp_refused(response), (sent, response.status_code, response.text[:300])


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_json_in_mcp_filters_metadata_and_whole_messages(nest: Harness, depth: int, nesting: str) -> None:
    raw = deep(depth, nesting)
    bodies = [mcp_call("query", with_raw(MCP_VALID["query"], "filters", raw)),
              mcp_call("insert", with_raw(MCP_VALID["insert"], "metadata", raw)),
              mcp_call("query", raw.encode())]
    if depth >= 1000:
        bodies.append(raw.encode())
    for body in bodies:
        sent = Sent("POST", "/mcp", body=body, headers=dict(MCP_HEADERS))
        response = nest.run(functools.partial(exchange, refused=mcp_refused), nest, sent)
        assert mcp_refused(response), (sent, response.status_code, response.text[:300])


# ------------------------------------------------------------- the chat's filter: header and prefix

CHAT_ROUTES = ("/api/chat", "/api/generate", "/v1/chat/completions")


def chat_request(path: str, text: str, headers: dict[str, str] | None = None, *, parts: bool = False,
                 stream: bool = False) -> Sent:
    if path == "/api/generate":
        body: dict[str, Any] = {"model": "llama3.2", "prompt": text, "stream": stream}
    else:
        content: Any = [{"type": "text", "text": text}] if parts else text
        body = {"model": "llama3.2", "messages": [{"role": "user", "content": content}], "stream": stream}
    return Sent("POST", path, body=json_bytes(body), headers={**JSON_TYPE, **(headers or {})})


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_x_graphgate_filter_is_refused_on_every_chat_route(nest: Harness, depth: int, nesting: str) -> None:
    for path in CHAT_ROUTES:
        for stream in (False, True):
            sent = chat_request(path, QUESTION, {"x-graphgate-filter": deep(depth, nesting)}, stream=stream)
            response = nest.run(exchange, nest, sent)
            assert 400 <= response.status_code < 500, (sent, response.status_code, response.text[:300])


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_prefix_filter_in_every_chat_route(nest: Harness, depth: int, nesting: str) -> None:
    """``/{...} q`` and ``/local{...}[be brief] q`` in the last user message (a string, or text parts)."""
    for prefix in ("/" + deep_object(depth, nesting) + " ", "/local" + deep_object(depth, nesting) + "[be brief] "):
        for path in CHAT_ROUTES:
            for parts in (False, True) if path == "/v1/chat/completions" else (False,):
                sent = chat_request(path, prefix + QUESTION, parts=parts)
                response = nest.run(exchange, nest, sent)
                # the braces follow the slash: the user meant a filter, and this one cannot be one (or
                # the body is over GRAPHGATE_MAX_BODY_BYTES: 413)
                assert 400 <= response.status_code < 500, (sent, response.status_code, response.text[:300])


# -------------------------------------------------------------------- ?filter= and multipart metadata

def multipart(fields: dict[str, str], files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "graphgate-deep-5c2e"
    out = bytearray()
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode("utf-8", "surrogatepass") + b"\r\n"
    for name, data in files:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
                "Content-Type: text/plain\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_filter_query_and_metadata_fields_are_refused(nest: Harness, depth: int, nesting: str) -> None:
    raw = deep(depth, nesting)
    sends = [Sent("GET", "/rag/documents", [("filter", in_url(raw))]),
             Sent("GET", "/admin/documents", [("filter", in_url(raw))])]
    body, kind = multipart({"metadata": raw}, [("deep-meta.txt", b"Text about Berlin, deep metadata.")])
    sends.append(Sent("POST", "/rag/documents", body=body, headers={"content-type": kind}))
    body, kind = multipart({"csrf": nest.csrf, "metadata": raw}, [("deep-meta.txt", b"Text about Berlin.")])
    sends.append(Sent("POST", "/admin/documents", body=body, headers={"content-type": kind}))
    form = {"csrf": nest.csrf, "metadata": raw}
    sends.append(Sent("POST", f"/admin/documents/{nest.documents[0]}/metadata", body=urlencode(form).encode(),
                      headers={"content-type": "application/x-www-form-urlencoded"}))
    for sent in sends:
        response = nest.run(exchange, nest, sent)
        assert 400 <= response.status_code < 500, (sent, response.status_code, response.text[:300])


# ----------------------------------------------------------------------------- the console's forms


class _Forms(HTMLParser):
    """The forms of a page: (method, action, [(field, value)]) with each field's value as rendered
    (a select's selected option, or its first)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, str, list[tuple[str, str]]]] = []
        self.select: str | None = None
        self.first: str | None = None
        self.chosen = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(((a.get("method") or "get").upper(), a.get("action", ""), []))
        elif not self.forms:
            return
        elif tag == "option" and self.select is not None:
            if self.first is None:
                self.first = a.get("value", "")
            if "selected" in a and not self.chosen:
                self.forms[-1][2].append((self.select, a.get("value", "")))
                self.chosen = True
        elif "name" not in a:
            return
        elif tag in ("input", "textarea"):
            if a.get("type") in ("checkbox", "radio", "file", "submit") and "checked" not in a:
                return
            self.forms[-1][2].append((a["name"], a.get("value", "")))
        elif tag == "select":
            self.select, self.first, self.chosen = a["name"], None, False

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self.select is not None:
            if not self.chosen and self.forms:
                self.forms[-1][2].append((self.select, self.first or ""))
            self.select = None


CONSOLE_PAGES_SKIPPED = ("/admin/login", "/admin/static", "/admin/playground/answer/")


def console_forms(h: Harness) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """Every form of every console page (the pages from the route table, their parameters naming
    the seeded store's things), with at least one field besides the CSRF token; crawled once."""
    if not hasattr(h, "forms"):
        h.forms = _crawl_forms(h)  # type: ignore[attr-defined]
    forms: list[tuple[str, str, tuple[tuple[str, str], ...]]] = h.forms  # type: ignore[attr-defined]
    return forms


def _crawl_forms(h: Harness) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    values = {"id": h.documents[0], "ref": ref(h.entity_keys[0]), "kind": "keywords", "name": "default",
              "alias": "deep-bot", "key": ref("nope"), "token": "x", "path": "console.css"}
    pages = [fill(t, values) for t, methods in app_routes(h.app)
             if t.startswith("/admin") and "GET" in methods and not t.startswith(CONSOLE_PAGES_SKIPPED)]

    async def crawl() -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
        found: dict[tuple[str, ...], tuple[str, str, tuple[tuple[str, str], ...]]] = {}
        for page in pages:
            response = await h.client.get(page)
            if response.status_code != 200 or "text/html" not in response.headers.get("content-type", ""):
                continue
            parser = _Forms()
            parser.feed(response.text)
            for method, action, fields in parser.forms:
                action = html.unescape(action) or page
                if action.endswith(("/delete", "/revoke", "/logout", "/clear")) or not action.startswith("/admin"):
                    continue  # a confirmation's form changes something with no field to put JSON in
                names = tuple(name for name, _ in fields)
                if any(name != "csrf" for name in names):
                    # one of each form: the knowledge base switcher is on every page, a relation's on many
                    where = "" if names == ("kb",) else re.sub(r"/relations/[^/]+/", "/relations/*/", action)
                    found.setdefault((method, where, *names), (method, action, tuple(fields)))
        return sorted(found.values())

    forms = h.run(crawl)
    assert len(forms) >= 8, forms  # the console has a dozen forms: the crawl did not find them
    return forms


# fields whose value is read as a JSON object
JSON_FORM_FIELDS = ("filter", "filters", "metadata", "options")
# of those, the ones that only take a flat object (a model's options may nest: Ollama passes them on)
FLAT_FORM_FIELDS = ("filter", "filters", "metadata")


def check_json_form_answer(h: Harness, sent: Sent, response: httpx.Response, target: str, depth: int) -> None:
    """A flat field's deep JSON is refused; a model's options too when deeper than any parser goes,
    and when taken, the model still works: listed, described, shown on its page."""
    status = response.status_code
    if target in FLAT_FORM_FIELDS or depth >= 1000:
        assert 400 <= status < 500, (sent, status, response.text[:300])
    elif status < 400:
        async def still_works() -> None:
            for method, path, body in (("GET", "/rag/models", None), ("GET", "/api/tags", None),
                                       ("POST", "/api/show", {"model": "deep-bot"}), ("GET", "/admin/models", None),
                                       ("GET", "/admin/models/deep-bot", None)):
                answer = await h.client.request(method, path, json=body, headers=h.auth)
                assert answer.status_code < 500, (sent, "then", path, answer.status_code, answer.text[:300])
        h.run(still_works)


def form_request(h: Harness, method: str, action: str, fields: tuple[tuple[str, str], ...], target: str,
                 raw: str) -> Sent:
    path = urlsplit(action).path
    if method == "GET":
        raw = in_url(raw)
    values = [(name, raw if name == target else value) for name, value in fields]
    if method == "GET":
        return Sent("GET", path, [(k, v) for k, v in values if k != "csrf"])
    if path == "/admin/documents":  # the upload form is multipart: a file with it
        body, kind = multipart(dict(values), [("deep-form.txt", b"Text about Berlin from the form.")])
        return Sent("POST", path, body=body, headers={"content-type": kind})
    return Sent("POST", path, body=urlencode(values).encode(),
                headers={"content-type": "application/x-www-form-urlencoded"})


@fuzz_settings(40)
@given(data=st.data(), depth=st.sampled_from(DEPTHS), nesting=st.sampled_from(NESTINGS))
def test_deep_json_in_any_console_form_field(nest: Harness, data: st.DataObject, depth: int, nesting: str) -> None:
    method, action, fields = data.draw(st.sampled_from(console_forms(nest)))
    target = data.draw(st.sampled_from([name for name, _ in fields if name != "csrf"]))
    raw = deep(depth, nesting)
    sent = form_request(nest, method, action, fields, target, raw)
    response = nest.run(exchange, nest, sent)
    if target in JSON_FORM_FIELDS:
        check_json_form_answer(nest, sent, response, target, depth)


@pytest.mark.parametrize(("depth", "nesting"), SWEEP, ids=SWEEP_IDS)
def test_deep_json_in_the_consoles_json_fields(nest: Harness, depth: int, nesting: str) -> None:
    """Every console form field that takes JSON (the filter, the playground's filters, a model's
    options, a document's metadata): a refusal, the page still readable."""
    raw = deep_object(depth, nesting)
    tried = set()
    for method, action, fields in console_forms(nest):
        for name, _ in fields:
            if name in JSON_FORM_FIELDS:
                tried.add(name)
                sent = form_request(nest, method, action, fields, name, raw)
                response = nest.run(exchange, nest, sent)
                check_json_form_answer(nest, sent, response, name, depth)
                assert "Traceback" not in response.text
    assert tried == set(JSON_FORM_FIELDS), tried


# ------------------------------------------------------------------------ every route, every header

@fuzz_settings(40)
@given(data=st.data(), depth=st.sampled_from(DEPTHS), nesting=st.sampled_from(NESTINGS))
def test_deep_json_in_headers_and_query_of_any_route(nest: Harness, data: st.DataObject, depth: int,
                                                     nesting: str) -> None:
    """The filter header and ``?filter=`` on any route (most ignore them: never a 5xx either way)."""
    template, methods = data.draw(st.sampled_from(app_routes(nest.app)))
    method = data.draw(st.sampled_from(methods))
    if method not in ("GET", "HEAD") and not template.startswith(("/api/", "/v1/", "/rag/query")):
        method = "GET"  # (a write with nothing else in it: the bodies are the tests above)
    values = {name: _param_value(nest, template, name, "GET") for name, _ in PARAM.findall(template)}
    raw = deep(depth, nesting)
    headers = {"x-graphgate-filter": raw} if data.draw(st.booleans()) else {}
    query = [("filter", in_url(raw))] if not headers or data.draw(st.booleans()) else []
    base = _valid_bodies(nest).get((method, template))
    sent = Sent(method, fill(template, values), query, None if base is None else json_bytes(base),
                {**headers, **(JSON_TYPE if base is not None else {})})
    nest.run(exchange, nest, sent)


# ------------------------------------------------------------------------- the upstream's replies


@pytest.fixture(scope="module")
def deep_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with started(fuzz_app_settings(tmp_path_factory.mktemp("fuzz-deep-upstream") / "data")) as harness:
        harness.run(_add_model, harness, "deep-bot")
        yield harness


UPSTREAM_PATHS = ("/api/tags", "/api/show", "/api/ps", "/api/chat", "/api/generate", "/api/embed", "/api/embeddings",
                  "/v1/chat/completions", "/v1/models", "/v1/embeddings", "/api/version")


def _chat(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": QUESTION}]}


# requests that make GraphGate read what the upstream answers (a list, a model's details, a chat,
# embeddings), then the console pages that show what was stored from such answers
UPSTREAM_TRIGGERS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/tags", None), ("GET", "/v1/models", None), ("GET", "/v1/models/deep-bot", None),
    ("GET", "/rag/models", None), ("PUT", "/rag/models/other-bot", {"model": "llama3.2"}),
    ("POST", "/api/show", {"model": "deep-bot"}), ("POST", "/api/show", {"model": "llama3.2"}),
    ("GET", "/api/ps", None),
    ("POST", "/api/chat", _chat("deep-bot", False)), ("POST", "/api/chat", _chat("deep-bot", True)),
    ("POST", "/api/chat", _chat("llama3.2", True)), ("POST", "/api/chat", _chat("llama3.2", False)),
    ("POST", "/v1/chat/completions", _chat("deep-bot", True)),
    ("POST", "/v1/chat/completions", _chat("deep-bot", False)),
    ("POST", "/api/generate", {"model": "deep-bot", "prompt": QUESTION, "stream": False}),
    ("POST", "/api/embed", {"model": "nomic-embed-text", "input": "Berlin"}),
    ("POST", "/v1/embeddings", {"model": "nomic-embed-text", "input": "Berlin"}),
    ("POST", "/rag/query", {"query": QUESTION, "answer": True}), ("POST", "/rag/query", {"query": "Who is Carol?"}),
    ("UPLOAD", "/rag/documents", None),
    ("GET", "/rag/health", None), ("GET", "/admin/", None), ("GET", "/admin/models", None),
    ("GET", "/admin/cache/keywords", None), ("GET", "/admin/cache/extract", None), ("GET", "/admin/chats", None),
]
TRIGGER_IDS = [f"{m} {p}" + (f" {b.get('model', '')}{' stream' if b.get('stream') else ''}" if b else "")
               for m, p, b in UPSTREAM_TRIGGERS]


# how a reply is made deep: replaced by the deep JSON, one more (deep) field in every object, or
# the model's text (what GraphGate's own structured calls parse) being it
REPLY_MODES = ("whole", "field", "content")


def _rewriter(raw: str, mode: str, paths: frozenset[str]):
    def rewrite(path: str, body: bytes) -> bytes:
        if path not in paths:
            return body
        if mode == "whole":
            return raw.encode() + b"\n"
        return deep_reply(body, raw) if mode == "field" else deep_content(body, raw)
    return rewrite


async def _upstream_exchange(h: Harness, method: str, path: str, body: dict[str, Any] | None, n: int) -> None:
    """One request under the deep replies: never a 500 nor an "internal error"; a 5xx is a readable
    502/503/504 naming the upstream; a stream ends as its protocol ends it; a document fails readably."""
    await quiesce(h)
    with anyio.fail_after(EXAMPLE_TIMEOUT):
        if method == "UPLOAD":
            response = await h.client.post(path, json={"name": f"deep-{n}.txt",
                                                       "text": f"Erin Blue {n} works at Acme Corp in Berlin."})
        else:
            response = await h.client.request(method, path, json=body)
        await response.aread()
        pages = []
        if path.startswith("/admin/cache/") or path == "/admin/chats":  # and every entry the list links to
            links = sorted(set(re.findall(r'href="(/admin/(?:cache/\w+/[\w-]+|chats/[\w-]+))"', response.text)))
            pages = [await h.client.get(link) for link in links[:5]]
    where = f"{method} {path} {json.dumps(body)[:200] if body else ''}"
    for answer in (response, *pages):
        status = answer.status_code
        assert status != 500 and "internal error" not in answer.text, (where, answer.request.url, answer.text[:300])
        if status > 500:
            assert status in (502, 503, 504) and "upstream" in answer.text, (where, status, answer.text[:300])
    if response.status_code == 200 and body and body.get("stream"):
        check_complete(Sent(method, path), response, h.upstream.calls)
    if method == "PUT" and response.status_code in (200, 201):
        await h.client.delete(path)
    if method == "UPLOAD" and response.status_code == 202:
        await settled_then_removed(h, response.json()["documents"][0]["id"])


async def _still_serving(h: Harness, where: str) -> None:
    """The knowledge base outlived the bad replies: it answers, and takes a write (a background task
    that died of one would have taken the store's task group with it)."""
    with anyio.fail_after(EXAMPLE_TIMEOUT):
        await anyio.wait_all_tasks_blocked()  # a late call (the turn's keywords) comes back meanwhile
        try:
            await quiesce(h)
            check_alive(h)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        stats = await h.client.get("/rag/stats", headers=h.auth)
        assert stats.status_code == 200, (where, "then /rag/stats:", stats.status_code, stats.text[:300])
        await h.kb.store.tables.db.write(lambda con: None)


def _under_deep_replies(h: Harness, raw: str, mode: str, paths: frozenset[str], trigger: int, n: int) -> None:
    h.upstream.rewrite = _rewriter(raw, mode, paths)
    where = f"{UPSTREAM_TRIGGERS[trigger][:2]} under {mode} replies {raw[:12]}...x{len(raw) // 2}"
    try:
        h.run(_upstream_exchange, h, *UPSTREAM_TRIGGERS[trigger], n)
    finally:
        h.upstream.rewrite = None
        h.upstream.calls.clear()
        h.fake.requests.clear()
    h.run(_still_serving, h, where)


@pytest.mark.parametrize("trigger", range(len(UPSTREAM_TRIGGERS)), ids=TRIGGER_IDS)
def test_deep_upstream_replies_under_every_request_that_reads_one(deep_up: Harness, trigger: int) -> None:
    """Every upstream path answers deep JSON (whole, one more field in every object, or as the model's
    text), past the parsers' limits: each request that reads a reply answers readably."""
    for n, (depth, nesting) in enumerate([(3000, "["), (100_000, "{")]):
        for m, mode in enumerate(REPLY_MODES):
            _under_deep_replies(deep_up, deep(depth, nesting), mode, frozenset(UPSTREAM_PATHS), trigger, n * 3 + m)


@fuzz_settings(30)
@given(trigger=st.integers(0, len(UPSTREAM_TRIGGERS) - 1), depth=st.sampled_from(DEPTHS),
       nesting=st.sampled_from(NESTINGS), mode=st.sampled_from(REPLY_MODES),
       paths=st.sets(st.sampled_from(UPSTREAM_PATHS), min_size=1), n=st.integers(0, 10**6))
def test_deep_upstream_replies_at_any_depth(deep_up: Harness, trigger: int, depth: int, nesting: str, mode: str,
                                            paths: set[str], n: int) -> None:
    _under_deep_replies(deep_up, deep(depth, nesting), mode, frozenset(paths), trigger, n)


def test_every_json_route_and_console_json_field_is_fuzzed(nest: Harness) -> None:
    """The routes come from the app's table, the forms from the console's pages: a sanity check
    that both found what they should (a JSON route or a JSON form field added later is included)."""
    routes = set(json_routes(nest))
    for expected in (("POST", "/api/chat"), ("POST", "/v1/chat/completions"), ("POST", "/rag/query"),
                     ("PUT", "/rag/models/{alias:path}"), ("PATCH", "/rag/documents/{id}")):
        assert expected in routes, expected
    names = {name for _, _, fields in console_forms(nest) for name, _ in fields}
    assert set(JSON_FORM_FIELDS) <= names, names
