"""Stored keys as well as the admin key on every route (issue 29 items 1, 2, 4 and 11).

Three gateways, as they are run: with GRAPHGATE_API_KEY, with only a console password, and with
neither (stored keys only). In each, three knowledge bases (``default``, ``alpha``, ``hiddenkb``, each
with a document and a knowledge model: ``default-bot``, ``alpha-bot``, ``hidden-bot``) and keys made
through ``POST /rag/keys``: read, write and admin, limited to ``default``, or to ``alpha``, or to no
base. Every route of the app's route table is sent as each of them (and with no key, and a wrong one):

- no key, or a wrong one: 401 with ``WWW-Authenticate: Bearer`` on /api, /v1, /rag (bar /rag/health)
  and /mcp, and nothing changes, the console included (a console without a password is no open door
  once keys exist);
- a read key changes nothing, whatever it sends; a key limited to some bases changes nothing in the
  others and never learns their names (``hiddenkb``, ``hidden-bot``) nor their content, unless it
  named them itself; and a read or write key gets, for a hidden name, exactly the answer it gets for a
  name that does not exist (``absentkb``, ``absent-bot``): the role is checked first, whatever the body;
- a stored key is never held to the 8 KiB bound of a request without credentials, and whenever it is
  refused for anything but its role or its bases, the admin key (or, with none, an unrestricted stored
  admin key) gets the very same answer, status and message;
- none of GraphGate's own headers nor its credentials reach the upstream (tests.fuzz_harness).
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from admin.rendering import ref
from tests.console_auth_helpers import PASSWORD
from tests.corpus import CLUB
from tests.fuzz_harness import (
    LONG,
    PARAM,
    Harness,
    Sent,
    app_routes,
    exchange,
    fill,
    fuzz_app_settings,
    fuzz_settings,
    quiesce,
    seed_documents,
    started,
)
from tests.fuzz_values import json_bytes

ADMIN_KEY = "fuzz-admin-key-0123456789"
QUESTION = "Who works at Acme Corp?"
PAD = "x" * (12 * 1024)  # past the 8 KiB a request without credentials may send
SECRET = "QUOKKA"        # a word only the hidden base's document holds
HIDDEN = {"hiddenkb": "absentkb", "hidden-bot": "absent-bot"}  # each hidden name, and a name nothing has
BASES = ("default", "alpha", "hiddenkb")
JSON_TYPE = {"content-type": "application/json"}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class Who:
    """A principal the fuzzer sends requests as."""
    name: str
    role: str | None                   # None: no valid credential
    kbs: tuple[str, ...] | None        # None: every base
    headers: tuple[tuple[str, str], ...] = ()
    reference: bool = False            # the one every stored key's refusals are compared with
    console: bool = False              # a logged-in console session (cookie + CSRF token)

    @property
    def stored(self) -> bool:
        return self.role is not None and not self.reference and not self.console

    @property
    def privileged(self) -> bool:
        """May change anything, everywhere (its destructive requests spare the fixtures)."""
        return self.role == "admin" and self.kbs is None or self.reference or self.console

    def sees(self, kb: str) -> bool:
        return self.role is not None and (self.kbs is None or kb in self.kbs)


# the stored keys of every configuration: (role, bases)
STORED = [("read", ("default",)), ("write", ("default",)), ("admin", ("default",)), ("read", None),
          ("write", None), ("admin", None), ("read", ("alpha",))]


def key_name(role: str, kbs: tuple[str, ...] | None) -> str:
    return f"k-{role}-{'all' if kbs is None else '-'.join(kbs)}"


CONFIGS = {"admin-key": {"api_key": ADMIN_KEY}, "password": {"admin_password": PASSWORD}, "keys-only": {}}


@dataclass
class World:
    h: Harness
    config: str
    principals: dict[str, Who]
    reference: Who
    documents: dict[str, list[str]]   # by base
    decoys: list[str]                 # ids of keys made to be revoked
    anon: dict[str, str]              # a console visitor's cookie and CSRF token (no login)


@pytest.fixture(scope="module", params=list(CONFIGS))
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    config = request.param
    settings = fuzz_app_settings(tmp_path_factory.mktemp(f"fuzz-keys-{config}") / "data", **CONFIGS[config])
    with started(settings, seed=False) as h:
        yield h.run(_prepare, h, config)


CSRF = re.compile(r'(?:name="csrf" value="|"X-CSRF-Token": *")([^"]+)"')


async def console_visitor(client: httpx.AsyncClient, cookie: str = "") -> dict[str, str]:
    """A console session's cookie and its CSRF token (a new visitor's, or ``cookie``'s)."""
    for path in ("/admin/", "/admin/login"):
        page = await client.get(path, headers={"cookie": cookie} if cookie else {})
        found = CSRF.search(page.text)
        if found:
            session = cookie or f"graphgate_session={client.cookies.get('graphgate_session')}"
            client.cookies.clear()
            return {"cookie": session, "x-csrf-token": found.group(1)}
    raise AssertionError("no console page carries a CSRF token")


async def _ok(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert response.status_code in statuses, (response.request.method, response.request.url, response.text[:300])
    body: dict[str, Any] = response.json()
    return body


async def _prepare(h: Harness, config: str) -> World:
    client = h.client
    anon = await console_visitor(client)
    console: dict[str, str] = {}
    if config == "password":
        page = await client.post("/admin/login", data={"csrf": anon["x-csrf-token"], "password": PASSWORD,
                                                       "next": "/admin/"}, headers={"cookie": anon["cookie"]})
        assert page.status_code in (200, 303), page.text[:300]
        client.cookies.clear()
        console = await console_visitor(client, page.headers.get("set-cookie", "").split(";")[0])
    client.cookies.clear()
    # the first key, the unrestricted admin's (it makes the rest): made with the admin key, the console's
    # login, or (no key yet) by anyone
    h.auth = {"authorization": f"Bearer {ADMIN_KEY}"} if config == "admin-key" else console
    made = await _ok(await client.post("/rag/keys", json={"name": "k-admin-all", "role": "admin", "kbs": None},
                                       headers=h.auth), 201)
    tokens = {"k-admin-all": made["token"]}
    if config != "admin-key":
        h.auth = {"authorization": f"Bearer {tokens['k-admin-all']}"}
    for name in BASES[1:]:
        await _ok(await client.post("/rag/kbs", json={"name": name}, headers=h.auth), 201)
    await seed_documents(h)
    documents = {"default": list(h.documents)}
    for kb, name, text in (("alpha", "club.txt", CLUB), ("hiddenkb", "hidden.txt",
                                                          f"The {SECRET} project is run by Carol White in Berlin.")):
        made = await _ok(await client.post("/rag/documents", params={"kb": kb}, json={"name": name, "text": text},
                                           headers=h.auth), 202)
        documents[kb] = [made["documents"][0]["id"]]
    for alias, kb in (("default-bot", "default"), ("alpha-bot", "alpha"), ("hidden-bot", "hiddenkb")):
        await _ok(await client.put(f"/rag/models/{alias}", json={"model": "llama3.2", "kb": kb}, headers=h.auth), 201)
    for role, kbs in STORED:
        if key_name(role, kbs) not in tokens:
            made = await _ok(await client.post("/rag/keys", json={"name": key_name(role, kbs), "role": role,
                                                                  "kbs": None if kbs is None else list(kbs)},
                                               headers=h.auth), 201)
            tokens[key_name(role, kbs)] = made["token"]
    decoys = []
    for n in range(3):
        made = await _ok(await client.post("/rag/keys", json={"name": f"decoy-{n}", "role": "read", "kbs": None},
                                           headers=h.auth), 201)
        decoys.append(made["id"])
    with anyio.fail_after(30):
        for kb in BASES[1:]:
            while (await client.get(f"/rag/documents/{documents[kb][0]}", params={"kb": kb},
                                    headers=h.auth)).json()["status"] not in ("processed", "failed"):
                await anyio.sleep(0.02)

    principals = {"none": Who("none", None, None), "wrong": Who("wrong", None, None, (
        ("authorization", "Bearer gg_000000000000_" + "A" * 43),))}
    for role, kbs in STORED:
        name = key_name(role, kbs)
        principals[name] = Who(name, role, kbs, (("authorization", f"Bearer {tokens[name]}"),))
    if config == "admin-key":
        principals["admin-key"] = Who("admin", "admin", None, (("authorization", f"Bearer {ADMIN_KEY}"),),
                                      reference=True)
        reference = principals["admin-key"]
    else:
        reference = principals["k-admin-all"] = Who("k-admin-all", "admin", None, principals["k-admin-all"].headers,
                                                    reference=True)
    if console:
        principals["console"] = Who("console", "admin", None, tuple(console.items()), console=True)

    async def others() -> dict[str, Any]:
        """What a request could change besides the default base's store: the lists, the other bases."""
        state: dict[str, Any] = {}
        for path in ("/rag/kbs", "/rag/keys", "/rag/models"):
            state[path] = (await client.get(path, headers=h.auth)).json()
        for base in state["/rag/kbs"].get("kbs", []):
            base.pop("open", None)  # opened on first use, closed when idle
        for kb in BASES[1:]:
            state[kb] = await base_state(client, kb, h.auth)
        return state

    h.extra_state = others
    return World(h, config, principals, reference, documents, decoys, anon)


async def base_state(client: httpx.AsyncClient, kb: str, auth: dict[str, str]) -> dict[str, Any]:
    stats = (await client.get("/rag/stats", params={"kb": kb}, headers=auth)).json()
    for volatile in ("bytes_on_disk", "cache_entries", "traces"):
        stats.pop(volatile, None)
    documents = (await client.get("/rag/documents", params={"kb": kb}, headers=auth)).json()
    return {"stats": stats, "documents": documents}


# ----------------------------------------------------------------------------------- requests

PROTECTED = ("/api/", "/v1/", "/rag/")
MODELS = ["llama3.2", "default-bot", "alpha-bot", "hidden-bot", "absent-bot"]
KB_NAMES = ["default", "alpha", "hiddenkb", "absentkb"]


def protected(method: str, path: str) -> bool:
    """Where a key is needed once keys exist."""
    if path == "/rag/health" and method in ("GET", "HEAD"):
        return False
    return path.startswith(PROTECTED) or path == "/mcp"


def _chat(model: str, text: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


def _mcp(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def multipart(text: str, name: str) -> tuple[bytes, str]:
    boundary = "graphgate-keys-81d0"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{{"k": "v"}}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            f"Content-Type: text/plain\r\n\r\n{text}\r\n--{boundary}--\r\n")
    return body.encode(), f"multipart/form-data; boundary={boundary}"


Pick = Callable[[Sequence[Any]], Any]


def keyed_request(w: World, who: Who, template: str, method: str, pick: Pick, name_pick: Pick | None = None) -> Sent:
    """A request of this route that its handler reads (a body it takes, names that exist or do not),
    as ``who``; destructive ones of a privileged principal spare the fixtures. ``pick`` chooses
    (hypothesis's ``draw``, or a seeded random source); ``name_pick``, when given, chooses the names
    of things: a path's, the knowledge base's, the model's."""
    name_pick = name_pick or pick
    n = pick(range(10**6))
    pad = PAD if pick([False, True]) else ""
    kb = name_pick(KB_NAMES)
    model = name_pick(MODELS)
    destructive = method == "DELETE" or template.endswith(("/delete", "/revoke", "/clear"))
    spare = who.privileged and destructive
    values: dict[str, str] = {}
    for name, _ in PARAM.findall(template):
        if name == "id" and ("/keys" in template):
            pool = [*w.decoys, "nope"]
        elif name == "id" and "/documents" in template:
            pool = [*w.documents["default"], "doc-nope"] if spare else [*sum(w.documents.values(), []), "doc-nope"]
        elif name == "name" and "/kbs" in template:
            pool = ["fuzzkb", "absentkb"] if spare else KB_NAMES
        elif name == "alias":
            pool = ["new-bot"] if who.role == "admin" and (method == "PUT" or spare) or spare else \
                ["default-bot", "alpha-bot", "hidden-bot", "absent-bot", "new-bot"]
        else:
            pool = {"name": ["Acme Corp", "Berlin", "Carol White", "Nobody"], "model": MODELS,
                    "digest": ["sha256:" + "0" * 64], "ref": [ref("berlin"), ref("nope")],
                    "kind": ["keywords", "extract"], "key": [ref("nope")], "token": ["x"],
                    "path": ["console.css"]}.get(name, ["x"])
        values[name] = name_pick(pool) if name in ("alias", "name", "model") else pick(pool)
    path = fill(template, values)
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    where = pick(["query", "header", "none"])
    if where == "query":
        query.append(("kb", kb))
    elif where == "header":
        headers["x-graphgate-kb"] = kb
    if template == "/rag/kbs/{name}" and method == "DELETE" and pick([False, True]):
        query.append(("confirm", values["name"]))
    body: Any = None
    route = (method, template)
    if route in (("POST", "/api/chat"), ("POST", "/v1/chat/completions")):
        body = _chat(model, QUESTION + pad, pick([False, True]))
    elif route in (("POST", "/api/generate"), ("POST", "/v1/completions")):
        body = {"model": model, "prompt": QUESTION + pad, "stream": False}
    elif route == ("POST", "/api/show"):
        body = {"model": model}
    elif route in (("POST", "/api/embed"), ("POST", "/v1/embeddings")):
        body = {"model": "nomic-embed-text", "input": "Berlin" + pad}
    elif route == ("POST", "/api/embeddings"):
        body = {"model": "nomic-embed-text", "prompt": "Berlin" + pad}
    elif route in (("POST", "/api/pull"), ("POST", "/api/push")):
        body = {"model": "llama3.2", "stream": False}
    elif route == ("POST", "/api/create"):
        body = {"model": name_pick(["fuzz-made", "hidden-bot"]), "from": "llama3.2", "stream": False}
    elif route == ("POST", "/api/copy"):
        body = {"source": "llama3.2", "destination": name_pick(["fuzz-copy", "hidden-bot"])}
    elif route == ("DELETE", "/api/delete"):
        body = {"model": "fuzz-copy"}
    elif route == ("POST", "/rag/documents"):
        text = f"Keyed text {n} about Berlin. {pad}"
        if pick([False, True]):
            raw, kind = multipart(text, f"k{n}.txt")
            return Sent(method, path, query, raw, {**headers, "content-type": kind})
        body = {"name": f"k{n}.txt", "text": text, "metadata": {"k": "v"}}
    elif route == ("PATCH", "/rag/documents/{id}"):
        body = {"metadata": {"k": f"v{n}"}}
    elif route == ("POST", "/rag/query"):
        body = {"query": QUESTION + pad}
    elif route == ("PATCH", "/rag/entities/{name:path}"):
        body = {"description": f"Edited {n}."}
    elif template == "/rag/relations":
        body = {"source": "Alice Smith", "target": "Acme Corp", "description": f"keyed {n}"}
    elif route == ("POST", "/rag/merge"):
        body = {"entities": ["Berlin", "Bob Jones"], "target": "Berlin", "dry_run": True}
    elif route == ("POST", "/rag/kbs"):
        body = {"name": "fuzzkb" if who.privileged else pick(["fuzzkb", "absentkb"])}
    elif route == ("PATCH", "/rag/kbs/{name}"):
        body = {"settings": {"chunk_tokens": pick([600, 700])}}
    elif route == ("PUT", "/rag/models/{alias:path}"):
        body = {"model": "llama3.2", "kb": pick([*KB_NAMES, 7, None])}
    elif route == ("POST", "/rag/keys"):
        body = {"name": f"fuzz-{n}", "role": pick(["read", "admin"]),
                "kbs": pick([None, ["default"], ["hiddenkb"], ["absentkb"]])}
    elif template == "/mcp":
        tool = pick(["query", "stats", "get_entities", "insert", "delete"])
        arguments: dict[str, Any] = {"kb": kb} if pick([False, True]) else {}
        victims = [*w.documents["default"], "doc-nope"] if who.privileged else [*sum(w.documents.values(), []),
                                                                                 "doc-nope"]
        arguments.update({"query": {"question": QUESTION + pad}, "stats": {}, "get_entities": {"query": "Acme"},
                          "insert": {"name": f"m{n}.txt", "text": f"Text {n} about Berlin. {pad}"},
                          "delete": {"document_id": pick(victims)}}[tool])
        return Sent(method, path, query, json_bytes(_mcp(tool, arguments)), {**headers, **JSON_TYPE, **MCP_ACCEPT})
    elif template.startswith("/admin") and method == "POST":
        form = {"/admin/keys": f"name=fuzz-{n}&role=admin", "/admin/kbs": "name=fuzzkb",
                "/admin/models": f"alias=new-bot&model=llama3.2&kb={kb}"}.get(template, "")
        if template.endswith("/delete") and "name" in values:
            form = f"confirm={values['name']}"
        form_type = {"content-type": "application/x-www-form-urlencoded"}
        return Sent(method, path, query, form.encode(), {**headers, **form_type})
    if body is None:
        return Sent(method, path, query, None, headers)
    return Sent(method, path, query, json_bytes(body), {**headers, **JSON_TYPE})


def as_who(w: World, who: Who, sent: Sent) -> Sent:
    """The request with ``who``'s credentials (on the console: a visitor's session and CSRF token)."""
    headers = dict(sent.headers)
    if sent.path.startswith("/admin") and not who.console:
        headers.update(w.anon)
    headers.update(dict(who.headers))
    return Sent(sent.method, sent.path, sent.query, sent.body, headers)


def mentions(sent: Sent, word: str) -> bool:
    text = sent.url + " " + json.dumps(sent.headers) + " " + (sent.body or b"").decode("latin-1")
    return word.lower() in text.lower() or quote(word) in text


def swapped(sent: Sent) -> Sent:
    """The request with every hidden name put as a name nothing has (same lengths)."""
    def swap(text: str) -> str:
        for hidden, absent in HIDDEN.items():
            text = text.replace(hidden, absent)
        return text

    body = sent.body
    if body is not None:
        for hidden, absent in HIDDEN.items():
            body = body.replace(hidden.encode(), absent.encode())
    return Sent(sent.method, swap(sent.path), [(k, swap(v)) for k, v in sent.query],
                body, {k: swap(v) for k, v in sent.headers.items()})


def _normalised(w: World, response: httpx.Response) -> tuple[int, str]:
    text = response.text
    for who in w.principals.values():
        text = text.replace(f"'{who.name}'", "'<key>'")
    return response.status_code, text


def legit_refusal(who: Who, response: httpx.Response) -> bool:
    """A refusal for the principal's role or bases: 403; for a key limited to some bases, a 404 or a
    "taken" 409 (what it may not see, it is told does not exist, or is another's)."""
    if who.reference or who.role == "admin" and who.kbs is None:
        return False
    status = response.status_code
    return status == 403 or who.kbs is not None and (status == 404 or status == 409 and "taken" in response.text)


def refuses_all(w: World, who: Who, sent: Sent) -> bool:
    """Whether every answer to this request must leave everything as it was: no credential, a read
    key, and on the console anyone but its own admin."""
    if who.role is None or who.role == "read":
        return True
    return sent.path.startswith("/admin") and not who.privileged


async def keyed_exchange(w: World, who: Who, sent: Sent, *, states: bool = True, second: bool = True) -> httpx.Response:
    """Send ``sent`` as ``who`` and check what the module promises: the answer's own checks, and
    (``states``) the state comparisons, (``second``) the requests that compare its answer with
    another's (the same request naming what does not exist; the admin's)."""
    h = w.h
    h.client.cookies.clear()
    mine = as_who(w, who, sent)
    hidden_before = None
    invisible = [kb for kb in BASES[1:] if not who.sees(kb)]
    if states and who.kbs is not None and who.role != "read":
        await quiesce(h)
        hidden_before = {kb: await base_state(h.client, kb, h.auth) for kb in invisible}
    always = refuses_all(w, who, sent)
    response = await exchange(h, mine, check_unchanged=states, refused=(lambda r: True) if always else None)
    where = f"{mine!r} as {who.name} ({w.config}) -> {response.status_code}: {response.text[:300]}"
    status = response.status_code

    if who.role is None or who.console and not sent.path.startswith(("/rag/", "/admin")):
        if protected(sent.method, sent.path):
            # (/mcp checks its key after the body's bound: over 8 KiB, that bound's 413 says what is missing)
            if not (status == 413 and "without valid credentials" in response.text):
                assert status == 401, where
                assert response.headers.get("www-authenticate") == "Bearer", where
    if who.stored or who.reference:
        bound = h.settings.max_body_bytes // 2
        assert not (status == 413 and len(sent.body or b"") < bound), f"a key's request within the bounds: {where}"
    # what a principal may not see, it never reads (unless it named it itself): the metrics included,
    # whose labels name every base (they need an unrestricted admin key once a limited key exists)
    secrets = [SECRET, *HIDDEN] if not who.sees("hiddenkb") else []
    if not who.sees("default"):
        secrets.append("default-bot")
    for word in secrets:
        if not mentions(sent, word):
            assert word.lower() not in response.text.lower(), f"{who.name} learnt of {word!r}: {where}"
    if hidden_before is not None:
        await quiesce(h)
        for kb in invisible:
            assert await base_state(h.client, kb, h.auth) == hidden_before[kb], f"changed base {kb!r}: {where}"
    if not second:
        return response

    # a hidden name is answered as a name nothing has, for a key that may not make things
    if who.kbs is not None and who.role in ("read", "write") and any(mentions(sent, name) for name in HIDDEN):
        other = await exchange(h, as_who(w, who, swapped(sent)), check_unchanged=states, refused=lambda r: True)
        mine_status, mine_text = _normalised(w, response)
        other_status, other_text = _normalised(w, other)
        for hidden, absent in HIDDEN.items():  # the answers as the second request would have them
            mine_text = mine_text.replace(hidden, absent)
        assert other_status == mine_status, f"{where}\nbut for a name nothing has: {other_status} {other_text[:300]}"
        if 400 <= mine_status < 500:
            assert other_text == mine_text, f"{where}\nbut for a name nothing has: {other_text[:300]}"
    # a stored key's refusal that is not for its role or bases: the admin's own answer
    if who.stored and 400 <= status < 500 and not sent.path.startswith("/admin") and not legit_refusal(who, response):
        theirs = await exchange(h, as_who(w, w.reference, sent), check_unchanged=states)
        assert _normalised(w, theirs) == _normalised(w, response), \
            f"{where}\nbut as {w.reference.name}: {theirs.status_code} {theirs.text[:300]}"
    return response


# -------------------------------------------------------------------------------------- tests


def routes(w: World) -> list[tuple[str, str]]:
    return [(method, template) for template, methods in app_routes(w.h.app) for method in methods
            if method != "HEAD" and not template.startswith("/admin/static")]


@fuzz_settings(40)
@given(data=st.data())
def test_any_principal_on_any_route(world: World, data: st.DataObject) -> None:
    method, template = data.draw(st.sampled_from(routes(world)))
    who = world.principals[data.draw(st.sampled_from(sorted(world.principals)))]
    sent = keyed_request(world, who, template, method, lambda choices: data.draw(st.sampled_from(choices)))
    world.h.run(keyed_exchange, world, who, sent)


def test_every_route_as_every_principal(world: World) -> None:
    """Each route of the table as every principal (CI: as a few of them in turn, the long profile:
    as all), a request its handler reads and, where it has a body, often over 8 KiB: the answers'
    own checks (the state comparisons are the hypothesis test's)."""
    chooser = random.Random(29)
    names = sorted(world.principals)
    for i, (method, template) in enumerate(routes(world)):
        chosen = names if LONG else ["none", *(names[(i + k) % len(names)] for k in (0, 3, 6))]
        for name in dict.fromkeys(chosen):
            who = world.principals[name]
            sent = keyed_request(world, who, template, method, chooser.choice)
            world.h.run(functools.partial(keyed_exchange, states=False, second=False), world, who, sent)


def name_routes(w: World) -> list[tuple[str, str]]:
    """The routes that take the name of a thing (in their path, or a body naming a base or a model)."""
    named = ("{alias", "{name", "{model")
    bodies = {"/api/chat", "/api/generate", "/api/show", "/v1/chat/completions", "/v1/completions", "/rag/keys",
              "/rag/kbs", "/api/create", "/api/copy", "/mcp"}
    return [(m, t) for m, t in routes(w) if any(p in t for p in named) or t in bodies and m in ("POST", "PUT")]


# once, in the admin-key configuration: the same routes, keys and answers in every configuration
@pytest.mark.parametrize("world", ["admin-key"], indirect=True)
def test_hidden_names_are_answered_as_names_nothing_has(world: World) -> None:
    """Every route that takes a name, as keys limited to some bases that may not make things (read,
    write), naming the hidden base's things: the answer is the one a name nothing has gets (the role
    first, whatever else the body says: each of its choices is tried in turn)."""
    for method, template in name_routes(world):
        for name in ("k-read-default", "k-write-default"):
            who = world.principals[name]
            for turn in range(6):
                def walk(choices: Sequence[Any], turn: int = turn) -> Any:
                    return choices[turn % len(choices)]

                def hidden_first(choices: Sequence[Any], turn: int = turn) -> Any:
                    return next((c for c in choices if c in HIDDEN), walk(choices))

                sent = keyed_request(world, who, template, method, walk, hidden_first)
                if any(mentions(sent, hidden) for hidden in HIDDEN):
                    world.h.run(functools.partial(keyed_exchange, states=False), world, who, sent)
