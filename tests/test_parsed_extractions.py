"""The merge's cache of parsed, alias-resolved extraction results, on a real DuckDB store."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.extraction.results import ExtractedEntity, ExtractedRelation, ExtractionResult
from proxy.merging.recompute import ParsedExtractions
from proxy.store.duckdb.connection import Database
from proxy.store.duckdb.graph_rows import DuckDBGraphRows
from proxy.store.store import now

pytestmark = pytest.mark.anyio

RESULT = ExtractionResult(
    entities=(ExtractedEntity("Bob Smith", "Person", "a builder"), ExtractedEntity("Acme", "Organization", "")),
    relations=(ExtractedRelation("Bob Smith", "Acme", ("works at",), "Bob works at Acme.", 1.0),),
)


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "g.duckdb")
    database.con.execute("INSERT INTO extractions VALUES ('c1', 'm', ?, '[]', ?)", [RESULT.to_json(), now()])
    yield database
    database.close()


async def test_read_once_then_held_until_the_aliases_change(db: Database) -> None:
    parsed = ParsedExtractions(size=8)
    first = await parsed.read(DuckDBGraphRows(db), ["c1", "absent"], {})
    assert set(first) == {"c1"} and set(first["c1"].entities) == {"bob smith", "acme"}
    db.con.execute("DELETE FROM extractions")  # held: not read again
    assert (await parsed.read(DuckDBGraphRows(db), ["c1"], {}))["c1"] is first["c1"]
    # Bob merged into "robert smith": what was indexed under the old aliases is not used
    db.con.execute("INSERT INTO extractions VALUES ('c1', 'm', ?, '[]', ?)", [RESULT.to_json(), now()])
    renamed = await parsed.read(DuckDBGraphRows(db), ["c1"], {"bob smith": "robert smith"})
    assert set(renamed["c1"].entities) == {"robert smith", "acme"}
    assert set(renamed["c1"].relations) == {"acme\x1frobert smith"}


async def test_only_the_latest_entries_are_kept(db: Database) -> None:
    parsed = ParsedExtractions(size=2)
    parsed.lookup((), {})
    for chunk_id in ("a", "b", "c"):
        parsed.index(chunk_id, RESULT, {})
    held, missing = parsed.lookup(["a", "b", "c"], {})
    assert set(held) == {"b", "c"} and missing == ["a"]
