"""``graphgate migrate-store`` on a real PostgreSQL: an embedded store of two knowledge bases, built by
the real gateway (documents, chunks, the graph, curation, communities, cache, traces), copied into
PostgreSQL and back; every table checked by the command, and here again independently: the round trip
gives the same tables, and a gateway on the copy answers a query as one on the original. A target
that holds documents, a store held by another process and a bad URI are refused with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import psycopg
import pytest

from proxy.core.data_dir import DATABASE_FILE
from proxy.core.settings import Settings
from proxy.store.migrate_rows import TABLES
from proxy.store.postgres.schema import drop
from tests.conftest import gateway_client
from tests.corpus import PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.test_cli_metadata import graphgate
from tests.test_communities import ALTO, ENTITIES, HARBOR, NIMBUS, Summaries, knowledge_of, summarised

QUESTION = {"query": "What does Nimbus Labs develop?", "mode": "mix"}
ORDER = {spec.name: ", ".join(f'"{c}"' for c in spec.primary_key) for spec in TABLES}


@pytest.fixture
def base(pg_server: str) -> Iterator[str]:
    """A second knowledge base's name, unique on the session's server; its schema and kb_default are
    dropped before and after the test."""
    name = f"hr{uuid.uuid4().hex[:8]}"
    schemas = ("kb_default", f"kb_{name}")
    with psycopg.connect(pg_server, autocommit=True) as con:
        for schema in schemas:
            drop(con, schema)
    yield name
    with psycopg.connect(pg_server, autocommit=True) as con:
        for schema in schemas:
            drop(con, schema)


async def ingest(client: httpx.AsyncClient, name: str, text: str, kb: str | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
    headers = {"x-graphgate-kb": kb} if kb else {}
    response = await client.post("/rag/documents", headers=headers,
                                 json={"name": name, "text": text, "metadata": metadata or {}})
    assert response.status_code in (200, 202), response.text
    document_id = response.json()["documents"][0]["id"]
    with anyio.fail_after(20):
        while (await client.get(f"/rag/documents/{document_id}", headers=headers)).json()["status"] != "processed":
            await anyio.sleep(0.02)


async def build_store(settings: Settings, fake: FakeOllama, kb: str) -> None:
    """Two bases, every table with rows: documents with metadata, the graph, hand edits, an alias, a
    dismissed merge suggestion, communities, the LLM cache, traces."""
    fake.structured = Summaries(KnownFacts({**ENTITIES, **PEOPLE}))
    async with gateway_client(settings.replace(community_summaries=True), fake) as client:
        knowledge_of(client).communities.retry_seconds = 0.05
        assert (await client.post("/rag/kbs", json={"name": kb})).status_code == 201
        await ingest(client, "nimbus.txt", NIMBUS, metadata={"team": "rd"})
        await ingest(client, "harbor.txt", HARBOR)
        await ingest(client, "alto.txt", ALTO)
        await ingest(client, "team.txt", TEAM, kb=kb, metadata={"category": "hr", "year": 2024})
        assert (await client.patch("/rag/entities/stratus board", json={"type": "Product"})).status_code == 200
        assert (await client.patch("/rag/relations", json={"source": "Nimbus Labs", "target": "Cirrus Engine",
                                                            "weight": 3})).status_code == 200
        assert (await client.post("/rag/merge", json={"entities": ["Alto Kit"],
                                                      "target": "Cirrus Engine"})).status_code == 200
        await knowledge_of(client).graph.dismiss_suggestion("harbor guild", "nimbus labs")
        await summarised(knowledge_of(client))
        assert (await client.post("/rag/query", json=QUESTION)).status_code == 200
        assert (await client.post("/rag/query", json=QUESTION, headers={"x-graphgate-kb": kb})).status_code == 200


def embedded_tables(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows in primary key order, read from the store's file."""
    with duckdb.connect(str(directory / DATABASE_FILE), read_only=True) as con:
        return {spec.name: con.execute(f"SELECT * FROM {spec.name} ORDER BY {ORDER[spec.name]}").fetchall()
                for spec in TABLES}


def pg_counts(dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(dsn) as con:
        return {spec.name: con.execute(f'SELECT count(*) FROM "{schema}".{spec.name}').fetchone()[0]  # type: ignore[index]
                for spec in TABLES}


def sequence(directory: Path, name: str) -> int:
    with duckdb.connect(str(directory / DATABASE_FILE), read_only=True) as con:
        row = con.execute("SELECT last_value FROM duckdb_sequences() WHERE sequence_name = ?", [name]).fetchone()
    return int(row[0] or 0) if row else 0


async def answer(settings: Settings, fake: FakeOllama, kb: str | None = None) -> dict[str, Any]:
    headers = {"x-graphgate-kb": kb} if kb else {}
    async with gateway_client(settings, fake) as client:
        response = await client.post("/rag/query", json=QUESTION, headers=headers)
    assert response.status_code == 200, response.text
    result = response.json()
    return {"context": result["context"], "entities": result["entities"], "relations": result["relations"],
            "chunks": result["chunks"]}


async def command(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``graphgate *args`` (it runs its own event loop: in a worker thread)."""
    return await anyio.to_thread.run_sync(lambda: graphgate(capsys, *args))


def flags(directory: Path) -> list[str]:
    return ["--data-dir", str(directory), "--port", "1"]


@pytest.mark.anyio
async def test_a_store_goes_to_postgresql_and_back_unchanged(
        settings: Settings, fake: FakeOllama, pg_server: str, base: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    data, back = settings.data_dir, tmp_path / "back"
    await build_store(settings, fake, base)
    original = {"default": embedded_tables(data), base: embedded_tables(data / "kbs" / base)}
    for name in original:   # every table has rows to copy, in one base or the other
        assert original[name]["chunks"] and original[name]["documents"], name
    assert all(original["default"][spec.name] or original[base][spec.name] for spec in TABLES), \
        {t: len(r) for t, r in original["default"].items()}

    status, out, err = await command(capsys, "migrate-store", "--to", pg_server, *flags(data))
    assert status == 0, err
    assert "MISMATCH" not in out and out.count(" match ") == 2 * len(TABLES), out
    assert f"PostgreSQL schema kb_{base}" in out and "every table matches" in err
    for name, tables in original.items():   # independently of the command's own check
        assert pg_counts(pg_server, f"kb_{name}") == {t: len(rows) for t, rows in tables.items()} | {
            "meta": len(tables["meta"]) + 1}   # and PostgreSQL's own vector_index
    with psycopg.connect(pg_server) as con:
        typed = con.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                            "'kb_default.chunks'::regclass AND attname = 'embedding'").fetchone()
        dim = len(original["default"]["chunks"][0][4])
        assert typed == (f"vector({dim})",)
        indexes = con.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'kb_default' "
                              "AND indexdef LIKE '% hnsw %'").fetchone()
        assert indexes == (4,)
        last = con.execute("SELECT last_value FROM kb_default.vector_keys").fetchone()
        assert last is not None and last[0] >= max(row[1] for row in original["default"]["chunks"])
        generation = con.execute("SELECT value FROM kb_default.meta WHERE key = 'generation'").fetchone()
        assert generation == (dict(original["default"]["meta"])["generation"],)

    status, out, err = await command(capsys, "migrate-store", "--from", pg_server, *flags(back))
    assert status == 0, err
    assert out.count(" match ") == 2 * len(TABLES), out
    registry = json.loads((back / "kbs" / "registry.json").read_text())
    assert list(registry["bases"]) == [base] and registry["bases"][base]["settings"] == {}
    assert embedded_tables(back) == original["default"]
    assert embedded_tables(back / "kbs" / base) == original[base]
    for name in ("vector_keys", "trace_ids"):
        assert sequence(back, name) == sequence(data, name)

    fake.structured = Summaries(KnownFacts({**ENTITIES, **PEOPLE}))
    before = await answer(settings, fake)
    assert before["chunks"]
    assert await answer(settings.replace(data_dir=back), fake) == before
    # the PostgreSQL gateway finds the same (its scores differ in the last digits: pgvector, not USearch)
    found = await answer(settings.replace(store=pg_server), fake)
    assert found["context"] == before["context"]
    assert [[item.get("name", item.get("id")) for item in found[kind]] for kind in ("entities", "chunks")] == \
        [[item.get("name", item.get("id")) for item in before[kind]] for kind in ("entities", "chunks")]
    assert await answer(settings.replace(data_dir=back), fake, base) == await answer(settings, fake, base)


@pytest.mark.anyio
async def test_one_base_only_and_a_target_with_documents_is_refused_unless_replaced(
        settings: Settings, fake: FakeOllama, pg_server: str, base: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = settings.data_dir
    await build_store(settings, fake, base)
    status, out, err = await command(capsys, "migrate-store", "--to", pg_server, "--kb", base, *flags(data))
    assert status == 0, err
    assert f"kb_{base}" in out and "kb_default" not in out
    with psycopg.connect(pg_server, autocommit=True) as con:
        assert con.execute("SELECT to_regnamespace('kb_default')").fetchone() == (None,)
        con.execute(f"UPDATE kb_{base}.documents SET name = 'marker'")

    status, out, err = await command(capsys, "migrate-store", "--to", pg_server, *flags(data))
    assert status == 1 and f"already holds documents in kb_{base}" in err and "--replace" in err, err
    with psycopg.connect(pg_server) as con:   # nothing written: neither default nor the base
        assert con.execute("SELECT to_regnamespace('kb_default')").fetchone() == (None,)
        assert con.execute(f"SELECT DISTINCT name FROM kb_{base}.documents").fetchall() == [("marker",)]

    status, out, err = await command(capsys, "migrate-store", "--to", pg_server, "--replace", *flags(data))
    assert status == 0, err
    assert out.count(" match ") == 2 * len(TABLES)
    with psycopg.connect(pg_server) as con:
        assert con.execute(f"SELECT name FROM kb_{base}.documents").fetchall() == [("team.txt",)]

    # back into the embedded store it came from: it holds documents
    before = (data / DATABASE_FILE).stat().st_mtime_ns, (data / "kbs" / "registry.json").read_bytes()
    status, _, err = await command(capsys, "migrate-store", "--from", pg_server, *flags(data))
    assert status == 1 and "already holds documents in default" in err and "--replace" in err, err
    assert ((data / DATABASE_FILE).stat().st_mtime_ns, (data / "kbs" / "registry.json").read_bytes()) == before
    original = embedded_tables(data)

    # a copy that fails half-way leaves the base it was to replace as it was
    from proxy.store.migrate_duckdb import DuckDBSide
    write = DuckDBSide.write

    def failing(self: DuckDBSide, spec: Any, batches: Any) -> None:
        if spec.name == "entities":
            raise duckdb.IOException("IO Error: No space left on device")
        write(self, spec, batches)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DuckDBSide, "write", failing)
        status, _, err = await command(capsys, "migrate-store", "--from", pg_server, "--replace", *flags(data))
    assert status == 1 and "failed: IO Error: No space left on device" in err, err
    assert embedded_tables(data) == original
    assert sorted(p.name for p in data.iterdir() if "migrating" in p.name) == []

    status, out, err = await command(capsys, "migrate-store", "--from", pg_server, "--replace", *flags(data))
    assert status == 0, err
    assert embedded_tables(data) == original


def test_bad_uris_and_a_store_in_use_are_refused_with_nothing_written(
        tmp_path: Path, pg_server: str, base: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    status, _, err = graphgate(capsys, "migrate-store", "--to", "mysql://db/x", *flags(data))
    assert status == 1 and "no PostgreSQL URI" in err, err
    status, _, err = graphgate(capsys, "migrate-store", "--from", "postgresql://nobody:secret@127.0.0.1:1/x",
                               *flags(data))
    assert status == 1 and "cannot connect to the PostgreSQL server at postgresql://nobody:***@127.0.0.1:1/x" in err
    assert "secret" not in err
    status, _, err = graphgate(capsys, "migrate-store", "--to", pg_server, *flags(data))
    assert status == 1 and "there is no knowledge store at" in err, err
    assert not data.exists()

    # a store another process holds open (the running gateway): its lock refuses the copy
    data.mkdir()
    with duckdb.connect(str(data / DATABASE_FILE)) as con:
        con.execute("CREATE TABLE documents (id VARCHAR)")
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); sys.stdin.read()", str(data / DATABASE_FILE)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        status, _, err = graphgate(capsys, "migrate-store", "--to", pg_server, *flags(data))
        assert status == 1 and "is open in another process" in err and "stop `graphgate serve`" in err, err
    finally:
        holder.communicate("")
    with psycopg.connect(pg_server) as con:
        assert con.execute("SELECT to_regnamespace('kb_default')").fetchone() == (None,)


@pytest.mark.anyio
async def test_a_copy_that_differs_from_its_source_is_a_failure_naming_the_table(
        settings: Settings, fake: FakeOllama, pg_server: str, base: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A target that stores a row other than it was given (here: one chunk's text) is caught by the check."""
    from proxy.store.migrate_postgres import PostgresSide

    await build_store(settings, fake, base)
    write = PostgresSide.write

    def altered(self: PostgresSide, spec: Any, batches: Any) -> None:
        def changed() -> Any:
            for rows in batches:
                if spec.name == "chunks" and self.schema == "kb_default":
                    rows = [(rows[0][0], rows[0][1], rows[0][2] + " (changed)", *rows[0][3:]), *rows[1:]]
                yield rows
        write(self, spec, changed())

    monkeypatch.setattr(PostgresSide, "write", altered)
    status, out, err = await command(capsys, "migrate-store", "--to", pg_server, *flags(settings.data_dir))
    assert status == 1 and "table chunks of knowledge base 'default'" in err, err
    assert [line.split()[0] for line in out.splitlines() if "MISMATCH" in line] == ["chunks"], out
