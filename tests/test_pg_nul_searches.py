"""A search with a NUL character (a console search box, ``?q=%00``) finds nothing on both backends:
PostgreSQL's text cannot hold one, so the server refuses it as a parameter; no stored row holds one,
so the PostgreSQL subjects answer "nothing" without asking (DuckDB's answer). Found by
tests/test_console_hostile.py's SQL-ish strings on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_pg_cache_traces import cache_of, seed
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
