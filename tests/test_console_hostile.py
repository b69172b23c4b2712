"""Hostile text in every field the console displays, and SQL-ish strings in every search box.

XSS: payloads go in through every way text reaches the store — document names and texts, entity
names, types and descriptions (from the model's extraction and from hand edits), relation
descriptions and keywords, chat questions (traces, the keyword cache), rejected uploads' names, the
login's ``next`` — then a crawler walks every console page and fragment it can reach from the
dashboard (links, htmx GETs, form actions that are GETs), plus the pages that echo input. No page may
contain a payload unescaped.

SQL: every search box (documents, entities, entity finder, cache kinds) and the sort/order/filter
parameters take classic injection strings: each answers 200 (or a clear 400 for a value outside its
list), matches literally, and leaves every table as it was.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from markupsafe import escape

from proxy.core.settings import Settings
from proxy.parsing.files import safe_name
from tests.background import background_written
from tests.conftest import gateway_client
from tests.console_helpers import post, ref, settled, upload_texts
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)

# one payload per way in, so a failure says which field leaked
P_NAME = "<script>alert('entity-name')</script>"
P_TYPE = '"><img src=x onerror=alert("entity-type")>'
P_QUOTE = "Quinn' onmouseover='alert(7)"
P_DOC = "<svg onload=alert(9)>.txt"
P_TEXT = "<iframe src=javascript:alert('text')></iframe>"
P_EDIT = "</textarea><script>alert('edited')</script>"
P_CHAT = "<img src=y onerror=alert('chat')>"
P_REJECTED = "<b onclick=alert('rejected')>x.exe"
P_NEXT = '"><script>alert("next")</script>'
PAYLOADS = {
    "entity name": P_NAME, "hand-edited type": P_TYPE, "quote in a name": P_QUOTE, "document name": P_DOC,
    "document text": P_TEXT, "hand edit": P_EDIT, "chat question": P_CHAT, "rejected upload": P_REJECTED,
    "login next": P_NEXT,
}
# the parts of each payload that would run if they reached the page as markup (escaped, their
# "<" and quotes become entities and the text is harmless)
DANGEROUS = [re.compile(p) for p in (
    r"<script>alert", r"<img src=[xy]", r"' onmouseover='", r"<svg onload", r"<iframe",
    r"</textarea><script", r"<b onclick", r'"><script', r'"><img')]

TEXT = (f"{P_NAME} met Quinn' onmouseover='alert(7) in Berlin. {P_TEXT} was said by {P_NAME}. "
        "Berlin is large.")
SKIP = ("/admin/static", "/admin/logout", "/admin/playground/answer/")


def leaks(page: str) -> list[str]:
    return [pattern.pattern for pattern in DANGEROUS if pattern.search(page)]


def links(page: str, base: str) -> set[str]:
    found = set()
    for attribute in ("href", "hx-get", "src"):
        for raw in re.findall(rf'{attribute}="([^"]*)"', page):
            url = urljoin(base, raw.replace("&amp;", "&"))
            parts = urlsplit(url)
            if parts.path.startswith("/admin") and not parts.path.startswith(SKIP):
                found.add(parts.path + (f"?{parts.query}" if parts.query else ""))
    for form in re.finditer(r"<form\b([^>]*)>", page):  # GET forms (searches, filters) with no input filled
        attrs = form.group(1)
        if 'method="post"' not in attrs.lower() and (action := re.search(r'action="([^"]*)"', attrs)):
            found.add(urlsplit(urljoin(base, action.group(1).replace("&amp;", "&"))).path)
    return found


@pytest.fixture
async def hostile(settings: Settings, fake: FakeOllama):
    fake.structured = KnownFacts({P_NAME: "Person", P_QUOTE.split(" in")[0]: "Person", "Berlin": "Location"})
    async with gateway_client(settings, fake) as client:
        uploaded = await upload_texts(client, (P_DOC, TEXT), ("plain.md", "Berlin has a river."))
        assert uploaded.status_code == 200, uploaded.text
        await settled(client)
        rejected = await post(client, "/admin/documents", htmx=True,
                              files=[("files", (P_REJECTED, b"MZ\x90", "application/octet-stream"))])
        assert rejected.status_code in (200, 415) and not leaks(rejected.text), rejected.text
        # a hand edit of a type and a description (the model's types are mapped onto the declared list)
        edited = await post(client, "/admin/entities/" + ref("berlin"),
                            {"name": "Berlin", "type": P_TYPE, "description": P_EDIT})
        assert edited.status_code in (200, 303), edited.text
        chat = await client.post("/api/chat", json={"model": "llama3.2:latest", "stream": False,
                                                    "messages": [{"role": "user", "content": f"Who is {P_CHAT}?"}]})
        assert chat.status_code == 200
        await kb_flush(client)
        yield client


async def kb_flush(client: httpx.AsyncClient) -> None:
    await background_written()  # traces and cache entries are written in the background


async def test_no_payload_reaches_any_page_unescaped(hostile: httpx.AsyncClient) -> None:
    start = ["/admin/", "/admin/documents", "/admin/entities", "/admin/suggestions", "/admin/cache",
             "/admin/chats", "/admin/settings", "/admin/playground", "/admin/graph",
             "/admin/entities?q=" + ref("<script>"), "/admin/documents?q=" + ref("<svg"),
             "/admin/entities/find?name=" + ref(P_NAME),
             "/admin/merge?key=" + ref(P_NAME.lower()) + "&key=berlin",
             "/admin/entities/" + ref(P_NAME), "/admin/documents/" + ref(P_DOC), "/admin/cache/" + ref(P_TYPE),
             "/admin/login?next=" + ref(P_NEXT)]
    seen: set[str] = set()
    queue = list(start)
    visited = 0
    while queue and visited < 400:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        for htmx in (False, True):
            response = await hostile.get(path, headers={"HX-Request": "true"} if htmx else {})
            assert response.status_code < 500, (path, response.text[:300])
            assert not leaks(response.text), (path, htmx, leaks(response.text))
            visited += 1
        if response.headers.get("content-type", "").startswith("text/html"):
            queue.extend(sorted(links(response.text, "http://127.0.0.1:11435" + path) - seen))
    # the crawl reached the pages that show each stored payload, escaped
    escaped: dict[str, str] = {}
    for path in seen:
        text = (await hostile.get(path)).text
        for field, payload in PAYLOADS.items():
            if str(escape(safe_name(payload) if field == "document name" else payload)) in text:
                escaped.setdefault(field, path)
    assert {"entity name", "hand-edited type", "document name", "document text", "hand edit",
            "chat question"} <= escaped.keys(), escaped
    assert any(p.startswith("/admin/entities/") for p in seen) and any(p.startswith("/admin/documents/doc-")
                                                                       for p in seen)
    assert any(p.startswith("/admin/chats/") for p in seen) and any(p.startswith("/admin/cache/") for p in seen)
    assert len(seen) >= 30, sorted(seen)


async def test_the_rejected_upload_and_the_login_echo_escaped(hostile: httpx.AsyncClient) -> None:
    rejected = await post(hostile, "/admin/documents",
                          files=[("files", (P_REJECTED, b"MZ\x90", "application/octet-stream"))])
    assert "&lt;b onclick" in rejected.text or "x.exe" in rejected.text
    assert not leaks(rejected.text)
    login = await hostile.get("/admin/login", params={"next": P_NEXT})
    assert not leaks(login.text)


SQLISH = ["' OR 1=1 --", "'; DROP TABLE entities; --", "%", "_", "\\", '"', "berlin' --", "1) OR (1=1",
          "%' UNION SELECT name_key FROM entities --", "\x00", "é' /*", "*/"]
SEARCHES = [("/admin/documents", "q"), ("/admin/entities", "q"), ("/admin/cache/extract", "q"),
            ("/admin/cache/keywords", "q"), ("/rag/documents", "search")]
LISTS = [("/admin/documents", "sort"), ("/admin/documents", "order"), ("/admin/documents", "status"),
         ("/admin/entities", "sort"), ("/admin/entities", "type"), ("/rag/documents", "sort"),
         ("/rag/documents", "order"), ("/rag/documents", "status")]


def counts(client: httpx.AsyncClient) -> dict[str, int]:
    db = client._transport.app.state.gateway.knowledge.store.tables.db  # type: ignore[attr-defined]
    tables = [r[0] for r in db.read_sync(lambda c: c.execute(   # either backend's tables
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall())]
    return {t: db.read_sync(lambda c, t=t: c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}


@on_both_backends
async def test_sqlish_strings_in_every_search_box_match_literally_and_change_nothing(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    from tests.corpus import CITY, TEAM

    async with gateway_client(settings, fake) as client:
        await upload_texts(client, ("team.txt", TEAM), ("city.md", CITY))
        await settled(client)
        before = counts(client)
        for path, name in SEARCHES:
            for value in SQLISH:
                response = await client.get(path, params={name: value})
                assert response.status_code == 200, (path, value, response.text[:200])
                text = response.text
                if path.startswith("/rag/"):
                    assert response.json()["documents"] == [], (path, value)  # no document name has % or _
                else:
                    # literal matching: the corpus has no such text, so nothing of it is listed
                    assert "Acme Corp" not in text or path.startswith("/admin/cache"), (path, value)
        for value in SQLISH:  # the name lookup behind extraction links: a 404 page, not a match
            response = await client.get("/admin/entities/find", params={"name": value})
            assert response.status_code == 404 and "no entity named" in response.text, (value, response.text[:200])
        for path, name in LISTS:
            for value in SQLISH:
                response = await client.get(path, params={name: value})
                assert response.status_code in (200, 400), (path, name, value, response.status_code)
        assert counts(client) == before
        assert (await client.get("/rag/stats")).json()["entities"] == before["entities"]
