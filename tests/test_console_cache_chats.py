"""The console's cache and chats pages in-process: per-kind counts, search, entry view, delete and
clear (CSRF-checked), escaping of stored text, htmx fragments; the chat turns' traces."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from proxy.knowledge.traces import Trace
from proxy.store.sql_traces import record_traces
from tests.conftest import gateway_client
from tests.console_helpers import post, ref, settled, upload_texts
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)


EVIL = "<script>alert(1)</script>"
BASE = datetime(2024, 5, 1, 12, 0, 0)


def db(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.gateway.knowledge.store.tables.db  # type: ignore[attr-defined]


def on_postgresql(client: httpx.AsyncClient) -> bool:
    return client._transport.app.state.gateway.knowledge.store.backend.name == "postgresql"  # type: ignore[attr-defined]


def _insert(con: Any, rows: list[tuple[str, str, str, str, str, int, int]], placeholder: str) -> None:
    for kind, key, model, request, response, hits, minutes in rows:
        con.execute("INSERT INTO llm_cache (kind, key, model, request, response, hits, created_at) "
                    f"VALUES ({', '.join([placeholder] * 7)})", [kind, key, model, request, response, hits,
                                                                BASE + timedelta(minutes=minutes)])


async def seed(client: httpx.AsyncClient, rows: list[tuple[str, str, str, str, str, int, int]]) -> None:
    await db(client).write(_insert, rows, "%s" if on_postgresql(client) else "?")   # psycopg's or DuckDB's


async def cache_keys(client: httpx.AsyncClient, kind: str | None = None) -> set[tuple[str, str]]:
    rows = await db(client).read(lambda c: c.execute("SELECT kind, key FROM llm_cache").fetchall())
    return {(k, key) for k, key in rows if kind is None or k == kind}


ROWS = [
    ("extract", "ex-1", "llama3", '{"messages": [{"role": "user", "content": "Alice leads Orion"}]}',
     '{"entities": ["Alice"]}', 3, 1),
    ("extract", "ex-2", "llama3", "plain request about Bob", "plain reply", 0, 2),
    ("summary", "su/1?x=y", "qwen", "summarise Acme", "Acme is a company", 5, 3),
    ("keywords", "kw-1", "qwen", EVIL, '{"high_level": ["x"]}', 1, 4),
]


async def test_kind_table_counts_sizes_and_hits(client: httpx.AsyncClient) -> None:
    empty = await client.get("/admin/cache")
    assert empty.status_code == 200 and "The cache is empty" in empty.text
    for label in ("extraction", "summary", "keywords", "answer"):
        assert f">{label}</a>" in empty.text
    await seed(client, ROWS)
    page = (await client.get("/admin/cache")).text
    assert "The cache is empty" not in page

    def row(kind: str) -> tuple[int, int, int]:
        match = re.search(rf'<tr data-kind="{kind}">.*?data-count="(\d+)".*?data-size="(\d+)".*?data-hits="(\d+)"',
                          page, re.DOTALL)
        assert match, kind
        return tuple(int(x) for x in match.groups())  # type: ignore[return-value]

    def size(kind: str) -> int:
        return sum(len((r[3] + r[4]).encode()) for r in ROWS if r[0] == kind)

    assert row("extract") == (2, size("extract"), 3)
    assert row("summary") == (1, size("summary"), 5)
    assert row("keywords") == (1, size("keywords"), 1)
    assert row("answer") == (0, 0, 0)
    assert '<a href="/admin/cache/extract">extraction</a>' in page


async def test_kind_page_lists_newest_first_searches_and_escapes(client: httpx.AsyncClient) -> None:
    await seed(client, ROWS)
    page = await client.get("/admin/cache/extract")
    assert page.status_code == 200 and "<html" in page.text
    assert re.findall(r'<tr data-key="([^"]+)"', page.text) == ["ex-2", "ex-1"]  # newest first
    assert 'hx-trigger="input changed delay:300ms, search"' in page.text

    found = await client.get("/admin/cache/extract", params={"q": "ORION"})  # case-insensitive, in the request
    assert re.findall(r'<tr data-key="([^"]+)"', found.text) == ["ex-1"]
    by_reply = await client.get("/admin/cache/extract", params={"q": "plain REPLY"})
    assert re.findall(r'<tr data-key="([^"]+)"', by_reply.text) == ["ex-2"]
    for hostile in ("%' OR 1=1 --", "%", "_", "'"):
        response = await client.get("/admin/cache/extract", params={"q": hostile})
        assert response.status_code == 200 and "No extraction entries match" in response.text, hostile

    fragment = await client.get("/admin/cache/extract", params={"q": "bob"},
                                headers={"HX-Request": "true", "HX-Target": "cache-rows"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert re.findall(r'<tr data-key="([^"]+)"', fragment.text) == ["ex-2"]
    other_target = await client.get("/admin/cache/extract", headers={"HX-Request": "true", "HX-Target": "main"})
    assert "<html" in other_target.text

    keywords = await client.get("/admin/cache/keywords", params={"q": "<script>"})
    assert "kw-1" in keywords.text and EVIL not in keywords.text
    entry = await client.get(f"/admin/cache/keywords/{ref('kw-1')}")
    assert entry.status_code == 200 and EVIL not in entry.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in entry.text

    assert (await client.get("/admin/cache/bogus")).status_code == 404
    assert (await client.get("/admin/cache/bogus/clear")).status_code == 404
    assert (await client.get("/admin/cache/extract?page=0")).status_code == 400
    assert (await client.get(f"/admin/cache/extract/{ref('missing')}")).status_code == 404
    assert (await client.get("/admin/cache/extract/A")).status_code == 400  # not a reference


async def test_kind_page_is_paginated(client: httpx.AsyncClient) -> None:
    await seed(client, [("answer", f"a-{i:03}", "m", "q", "r", 0, i) for i in range(120)])
    first = (await client.get("/admin/cache/answer")).text
    keys = re.findall(r'<tr data-key="([^"]+)"', first)
    assert len(keys) == 50 and keys[0] == "a-119" and "Page 1 of 3 (120 in all)" in first
    last = (await client.get("/admin/cache/answer", params={"page": 3})).text
    assert re.findall(r'<tr data-key="([^"]+)"', last)[-1] == "a-000" and len(re.findall("<tr data-key", last)) == 20


async def test_entry_view_pretty_prints_json_and_keys_with_any_character(client: httpx.AsyncClient) -> None:
    await seed(client, ROWS)
    entry = await client.get(f"/admin/cache/extract/{ref('ex-1')}")
    assert entry.status_code == 200
    assert '"content": "Alice leads Orion"' in entry.text.replace("&#34;", '"')
    assert "\n  " in entry.text.split('id="cache-request">', 1)[1].split("</pre>", 1)[0]  # indented
    odd = await client.get(f"/admin/cache/summary/{ref('su/1?x=y')}")
    assert odd.status_code == 200 and "Acme is a company" in odd.text and "qwen" in odd.text


async def test_delete_needs_csrf_and_removes_exactly_that_entry(client: httpx.AsyncClient) -> None:
    await seed(client, ROWS)
    path = f"/admin/cache/summary/{ref('su/1?x=y')}/delete"
    refused = await post(client, path, csrf=False)
    assert refused.status_code == 403
    assert ("summary", "su/1?x=y") in await cache_keys(client)

    page = await client.get(f"/admin/cache/summary/{ref('su/1?x=y')}")
    token = must_find(r'name="csrf" value="([^"]+)"', page.text).group(1)
    done = await client.post(path, data={"csrf": token})
    assert done.status_code == 303 and done.headers["location"] == "/admin/cache/summary"
    assert await cache_keys(client) == {(r[0], r[1]) for r in ROWS} - {("summary", "su/1?x=y")}


async def test_clear_confirms_and_removes_only_that_kind(client: httpx.AsyncClient) -> None:
    await seed(client, ROWS)
    confirm = await client.get("/admin/cache/extract/clear")
    assert confirm.status_code == 200
    assert re.search(r'id="clear-count">2</strong> extraction entries', confirm.text)
    assert (await post(client, "/admin/cache/extract/clear", csrf=False)).status_code == 403
    assert len(await cache_keys(client, "extract")) == 2
    done = await post(client, "/admin/cache/extract/clear")
    assert done.status_code == 303 and done.headers["location"] == "/admin/cache"
    assert await cache_keys(client) == {(r[0], r[1]) for r in ROWS if r[0] != "extract"}
    assert (await post(client, "/admin/cache/bogus/clear")).status_code == 404


async def record(client: httpx.AsyncClient, traces: list[Trace]) -> None:
    database = db(client)
    await database.write(database.dialect.bind(record_traces), traces)


AUGMENTED = Trace("ollama", "llama3", "mix", "Who leads Orion?", True, None, {
    "keywords": {"high_level": ["leadership"], "low_level": ["Orion"], "source": "model"},
    "entities": ["Alice Smith", "Orion"], "relations": [["Alice Smith", "Orion"]], "chunks": ["chunk-abc"],
    "tokens": {"instructions": 40, "entities": 20, "relations": 10, "chunks": 30, "total": 123},
    "timings": {"keywords": 1.5, "total": 7.25},
    "budget": {"window": 8192, "window_source": "model", "conversation": 12, "reserve": 1024, "available": 7000,
               "total": 4000, "entity": 1000, "relation": 1000, "raised_num_ctx": None, "reason": None}})


async def test_chats_list_and_detail(client: httpx.AsyncClient) -> None:
    empty = await client.get("/admin/chats")
    assert empty.status_code == 200
    assert "No chat turns yet — point a client at GraphGate and ask something" in empty.text
    await record(client, [AUGMENTED,
                          Trace("openai", "gpt", "local", EVIL + " and more", False, "nothing relevant found", {}),
                          Trace("query", "", "naive", "x" * 300, False, None, {"detail": "unexpected shape"})])
    page = await client.get("/admin/chats")
    assert page.status_code == 200 and "No chat turns yet" not in page.text
    ids = [int(i) for i in re.findall(r'<tr data-id="(\d+)"', page.text)]
    assert len(ids) == 3 and ids == sorted(ids, reverse=True)  # newest first
    assert "Who leads Orion?" in page.text and "nothing relevant found" in page.text and "123" in page.text
    assert EVIL not in page.text and "&lt;script&gt;" in page.text
    assert "x" * 300 not in page.text  # truncated in the table

    detail = await client.get(f"/admin/chats/{ids[-1]}")
    assert detail.status_code == 200
    text = detail.text
    for shown in ("Who leads Orion?", "leadership", "Alice Smith", "Alice Smith — Orion", "chunk-abc", "123",
                  "7.25 ms", "8192", "Raw trace (JSON)"):
        assert shown in text, shown
    hostile = await client.get(f"/admin/chats/{ids[1]}")
    assert hostile.status_code == 200 and EVIL not in hostile.text and "nothing relevant found" in hostile.text
    assert (await client.get(f"/admin/chats/{ids[0]}")).status_code == 200  # an odd detail still renders

    assert (await client.get("/admin/chats/999999")).status_code == 404
    assert (await client.get("/admin/chats/abc")).status_code == 400
    assert (await client.get("/admin/chats/-1")).status_code == 400
    assert (await client.get("/admin/chats/99999999999999999999999")).status_code == 400
    assert (await client.get("/admin/chats?page=x")).status_code == 400


async def test_chats_are_paginated(client: httpx.AsyncClient) -> None:
    await record(client, [Trace("ollama", "m", "mix", f"question {i}", True) for i in range(60)])
    first = (await client.get("/admin/chats")).text
    assert len(re.findall(r'<tr data-id=', first)) == 50 and "question 59" in first and "Page 1 of 2" in first
    second = (await client.get("/admin/chats", params={"page": 2})).text
    assert len(re.findall(r'<tr data-id=', second)) == 10 and "question 0<" in second
    beyond = await client.get("/admin/chats", params={"page": 5})
    assert beyond.status_code == 200


async def test_pages_answer_503_without_a_store(client: httpx.AsyncClient) -> None:
    gateway = client._transport.app.state.gateway  # type: ignore[attr-defined]
    bases = gateway.bases   # the store as the lifespan leaves it when it cannot open: no default, and why
    saved = gateway.knowledge
    gateway.knowledge = bases.default = None
    gateway.knowledge_error = bases.default_error = "disk full"
    try:
        for path in ("/admin/cache", "/admin/cache/extract", "/admin/chats", "/admin/chats/1"):
            response = await client.get(path)
            assert response.status_code == 503 and "disk full" in response.text, path
    finally:
        gateway.knowledge = bases.default = saved
        gateway.knowledge_error = bases.default_error = None


async def test_real_ingestion_and_chat_show_up(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await upload_texts(client, ("team.txt", TEAM), ("city.md", CITY))
        await settled(client)
        await client.post("/api/chat", json={"model": "llama3.2:latest", "stream": False,
                                             "messages": [{"role": "user", "content": "Who works at Acme Corp?"}]})
        with anyio.fail_after(10):  # traces and cache entries are written in the background
            while not await db(client).read(lambda c: c.execute(
                    "SELECT (SELECT count(*) FROM traces) * (SELECT count(*) FROM llm_cache WHERE kind = 'keywords')"
            ).fetchone()[0]):
                await anyio.sleep(0.05)
        counts = dict(await db(client).read(
            lambda c: c.execute("SELECT kind, count(*) FROM llm_cache GROUP BY kind").fetchall()))
        assert counts.get("extract") and counts.get("keywords")
        page = (await client.get("/admin/cache")).text
        for kind in ("extract", "summary", "keywords", "answer"):
            assert re.search(rf'<tr data-kind="{kind}">.*?data-count="{counts.get(kind, 0)}"', page, re.DOTALL), kind
        listed = (await client.get("/admin/cache/extract")).text
        key = re.findall(r'<tr data-key="([^"]+)"', listed)[0]
        assert (await client.get(f"/admin/cache/extract/{ref(key)}")).status_code == 200

        chats = (await client.get("/admin/chats")).text
        assert "Who works at Acme Corp?" in chats and "badge accepted" in chats
        turn = must_find(r'<tr data-id="(\d+)"', chats).group(1)
        detail = (await client.get(f"/admin/chats/{turn}")).text
        assert "Acme Corp" in detail.split('id="chat-entities"', 1)[1] and 'id="chat-chunks"' in detail
