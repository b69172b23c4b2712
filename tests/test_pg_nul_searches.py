"""NUL characters from clients, on both backends. PostgreSQL's text cannot hold one, and the server
refuses it as a parameter. A search with one (a console search box, ``?q=%00``) finds nothing: no
stored row holds one, so the PostgreSQL subjects answer "nothing" without asking (DuckDB's answer;
found by tests/test_console_hostile.py's SQL-ish strings on PostgreSQL). A chat's question with one
is still traced."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.store.protocols.traces import Trace
from tests.test_pg_cache_traces import cache_of, record, seed, traces_of
from tests.test_pg_documents import documents_of
from tests.test_pg_graph_rows import graph_rows_of
from tests.test_pg_graph_rows import seed as seed_graph

pytestmark = pytest.mark.anyio

NUL_SEARCHES = ["\x00", "a\x00", "\x00%"]


async def test_a_cache_search_with_nul_finds_nothing(backend_db: tuple[str, Any]) -> None:
    await seed(backend_db, [("extract", "k1", "m", "a request", "a response", 0, 1)])
    cache = cache_of(backend_db)
    assert (await cache.entries("extract", "request", 10, 0))[1] == 1
    for search in NUL_SEARCHES:
        assert await cache.entries("extract", search, 10, 0) == ([], 0), repr(search)


async def test_an_entity_search_or_type_with_nul_finds_nothing(backend_db: tuple[str, Any]) -> None:
    await seed_graph(backend_db)
    rows = graph_rows_of(backend_db)
    assert (await rows.names_page("", "Person", False, 10, 0))[1] == 3
    for search in NUL_SEARCHES:
        assert await rows.names_page(search, "", False, 10, 0) == ([], 0), repr(search)
        assert await rows.names_page("", search, False, 10, 0) == ([], 0), repr(search)
        assert await rows.matching_keys(search, "") == [], repr(search)
        assert await rows.matching_keys("", search) == [], repr(search)


async def test_a_lookup_with_nul_finds_nothing(backend_db: tuple[str, Any]) -> None:
    """A name, key or id with a NUL names nothing stored: "not found" on both backends (PostgreSQL
    would refuse the statement), and deleting it deletes nothing."""
    await seed(backend_db, [("extract", "k1", "m", "a request", "a response", 0, 1)])
    await seed_graph(backend_db)
    cache, rows, documents = cache_of(backend_db), graph_rows_of(backend_db), documents_of(backend_db)
    assert await rows.resolve_name("alice") == "alice" and await cache.entry("extract", "k1") is not None
    for text in NUL_SEARCHES:
        assert await rows.resolve_name(text) is None and await rows.alias_target(text) is None, repr(text)
        assert await rows.entity_detail(text, 3) is None, repr(text)
        assert await cache.entry("extract", text) is None and await cache.entry(text, "k1") is None, repr(text)
        await cache.delete("extract", text)
        assert await documents.get(text) is None and await documents.named(text) == [], repr(text)
    assert await cache.count("extract") == 1


async def test_a_question_with_nul_is_traced_with_the_rest_of_its_batch(backend_db: tuple[str, Any]) -> None:
    """A chat's question is the client's text: one with a NUL failed the whole batch of traces on
    PostgreSQL. It is kept there with U+FFFD in place of the NUL (its text cannot hold one)."""
    traces = traces_of(backend_db)
    question = "who is\x00 Alice?"
    await record(traces, [Trace("ollama", "llama3\x00", "mix", question, True, "why\x00", {"q": question}),
                          Trace("ollama", "llama3", "mix", "hello", True)])
    recent = await traces.recent(10, 0)
    assert [t["query"].replace("\ufffd", "\x00") for t in recent] == ["last of the batch", "hello", question]
    assert (recent[2]["model"].replace("\ufffd", "\x00"), recent[2]["reason"].replace("\ufffd", "\x00")) == (
        "llama3\x00", "why\x00")
    assert recent[2]["detail"] == {"q": question}   # JSON escapes it: kept as it was on both
