"""A changed embedding model is never mixed in silently (issue 30, item 1).

Each vector table records the model its vectors come from; a commit never adds another model's
vectors to a table that holds some; a gateway started with another GRAPHGATE_EMBED_MODEL says so
(log, /rag/health, the dashboard, /metrics), keeps documents pending with the reason and embeds
questions by the stored model; ``graphgate reindex`` re-embeds everything, resumable after a kill,
for each knowledge base, on both backends (proxy/knowledge/embedding_guard.py, proxy/knowledge/reindex.py,
proxy/store/vector_models.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import numpy as np
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from proxy.core.data_dir import DATABASE_FILE
from proxy.core.errors import EmbeddingModelMismatch
from proxy.core.settings import Settings
from proxy.knowledge.bases import base_settings_sync
from proxy.knowledge.reindex import reindexing
from proxy.knowledge.service import Knowledge
from proxy.store.backends import EMBEDDED, Backend, postgresql
from proxy.store.changes import Changeset, ChunkRow
from proxy.store.duckdb.schema import MIGRATIONS as DUCKDB_MIGRATIONS
from proxy.store.postgres.schema import V1 as POSTGRES_V1
from proxy.store.store import KnowledgeStore
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, TableModel
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, normalize
from tests.invariants import check_store
from tests.rag_helpers import graph, query, settle, upload
from tests.servers import silent_port
from tests.store_backends import backend_of, on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
STORED, NEW = "nomic-embed-text", "other-embed"


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    return with_store_setting(settings, request)


def add_model(fake: FakeOllama, name: str, dim: int) -> None:
    """An embedding model the fake upstream serves, of ``dim`` dimensions."""
    fake.models[f"{name}:latest"] = dict(fake.models["nomic-embed-text:latest"], name=f"{name}:latest",
                                         model=f"{name}:latest")
    fake.embed_dims[f"{name}:latest"] = dim


def embedded_texts(fake: FakeOllama, model: str) -> list[str]:
    """Every text the fake upstream was asked to embed by ``model``, in order."""
    texts: list[str] = []
    for request in fake.requests_to("/api/embed"):
        if normalize(request.json["model"]) == normalize(model):
            given = request.json["input"]
            texts += [given] if isinstance(given, str) else given
    return texts


def knowledge_of(client: httpx.AsyncClient) -> Knowledge:
    return client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]


def mismatch_gauge(metrics: str) -> dict[tuple[str, str, str], float]:
    """``graphgate_embedding_model_mismatch`` by (kb, configured, stored)."""
    return {(s.labels["kb"], s.labels["configured"], s.labels["stored"]): s.value
            for family in text_string_to_metric_families(metrics) if family.name == "graphgate_embedding_model_mismatch"
            for s in family.samples}


def vec(seed: int, dim: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).random(dim, dtype=np.float32)


# --- the store: one model a table ---

async def test_a_table_takes_no_vectors_of_a_second_model(tmp_path: Path, store_backend: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    try:
        store.embed_model = STORED
        await store.apply(Changeset(chunks_added=[ChunkRow("c1", "one", 1, vec(1))]))
        models = await store.tables.reembed.models()
        assert models["chunks"] == TableModel(STORED, 8) and models["entities"] == TableModel(None, None)

        generation = store.generation
        store.embed_model = NEW
        with pytest.raises(EmbeddingModelMismatch, match=f"chunks vectors come from {STORED}.*graphgate reindex"):
            await store.apply(Changeset(chunks_added=[ChunkRow("c2", "two", 1, vec(2))]))
        assert store.generation == generation   # rolled back: nothing written, nothing indexed
        assert (await store.stats())["chunks"] == 1 and store.vector_count("chunks") == 1

        store.embed_model = f"{STORED}:latest"   # the same model, spelt with its tag
        await store.apply(Changeset(chunks_added=[ChunkRow("c2", "two", 1, vec(2))]))
        store.embed_model = NEW   # a table emptied takes the new model on (a removal adds no vectors)
        await store.apply(Changeset(chunks_removed=["c1", "c2"]))
        await store.apply(Changeset(chunks_added=[ChunkRow("c3", "three", 1, vec(3))]))
        assert (await store.tables.reembed.models())["chunks"] == TableModel(NEW, 8)
    finally:
        await store.close()


@pytest.fixture(params=["embedded", "postgresql"])
def older_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A store as the release before this one left it: one store-wide record of the model (and the
    schema version before the per-table records)."""
    meta = [("embed_model", STORED), ("embed_dim", "64")]
    if request.param == "embedded":
        with duckdb.connect(str(tmp_path / DATABASE_FILE)) as embedded:
            for migration in DUCKDB_MIGRATIONS[:6]:
                embedded.execute(migration)
            embedded.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [("schema_version", "6"), *meta])
        yield EMBEDDED
        return
    dsn, schema = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema")
    with psycopg.connect(dsn, autocommit=True) as con, con.transaction():
        con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        con.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        con.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)))
        con.execute(POSTGRES_V1)
        for key, value in [("schema_version", "1"), *meta]:
            con.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        [key, value])
    yield postgresql(dsn, schema)


async def test_an_older_store_gives_its_one_record_to_every_table(tmp_path: Path, older_store: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=older_store)
    try:
        assert await store.tables.reembed.models() == {table: TableModel(STORED, 64) for table in VECTOR_TABLES}
        assert await store.tables.reembed.staged_models() == {}
    finally:
        await store.close()


# --- a gateway started with another model ---

@on_both_backends
@pytest.mark.parametrize("dim", [64, 128], ids=["same-dimension", "other-dimension"])
async def test_a_gateway_with_another_model_says_so_waits_and_reindex_moves_everything(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, live_upstream: str, dim: int,
        caplog: pytest.LogCaptureFixture) -> None:
    async with gateway_client(settings, fake) as client:
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])
        before = await graph(client)
    add_model(fake, NEW, dim)
    changed = settings.replace(embed_model=NEW)
    fake.requests.clear()
    async with gateway_client(changed, fake) as client:
        said = [m for r in caplog.records if NEW in (m := r.getMessage()) and "graphgate reindex" in m]
        assert len(said) == 1 and STORED in said[0]   # in the log, once, at start-up

        health = (await client.get("/rag/health")).json()
        assert health["status"] == "degraded" and health["ready"] is True
        [problem] = [p for p in health["problems"] if NEW in p]
        assert STORED in problem and "`graphgate reindex`" in problem
        assert health["embedding"]["mismatched"] == ["chunks", "entities", "relations"]
        assert health["embedding"]["questions_embedded_by"] == STORED
        assert mismatch_gauge((await client.get("/metrics")).text) == {("default", NEW, STORED): 3.0}
        page = (await client.get("/admin/")).text
        assert 'id="embedding-mismatch"' in page and "graphgate reindex" in page

        # an upload is kept, and waits (pending) saying why: nothing of it reaches the tables
        waiting = await upload(client, "city.md", CITY)
        assert waiting["status"] == "pending" and waiting["waiting"] == problem
        pipeline = knowledge_of(client).pipeline
        assert pipeline.gate.closed and waiting["id"] in pipeline.status()["queued"] and not pipeline.running
        listed = (await client.get(f"/rag/documents/{waiting['id']}")).json()
        assert (listed["status"], listed["error"]) == ("pending", problem)

        # questions are embedded by the model the stored vectors come from: still grounded
        answered = await query(client, query="Who leads the Orion project?", mode="local")
        assert answered["embedded_by"] == STORED and answered["entities"]
        assert embedded_texts(fake, STORED) and not embedded_texts(fake, NEW)

        # a hand edit would embed by the new model: refused, nothing changed
        edit = await client.patch("/rag/entities/Alice Smith", json={"description": "Leads the Orion project."})
        assert edit.status_code == 409 and "graphgate reindex" in edit.json()["error"], edit.text
        after = await graph(client)
        assert [after[k] for k in ("chunks", "entities", "relations")] == [
            before[k] for k in ("chunks", "entities", "relations")]

    async with reindexing(changed.replace(upstream=live_upstream)) as run:
        await run(lambda *_: None)

    async with gateway_client(changed, fake) as client:
        health = (await client.get("/rag/health")).json()
        assert not [p for p in health["problems"] if NEW in p] and health["embedding"]["mismatched"] == []
        assert mismatch_gauge((await client.get("/metrics")).text) == {("default", NEW, NEW): 0.0}
        assert (await settle(client, waiting["id"]))["status"] == "processed"   # what waited goes on
        kb = knowledge_of(client)
        assert await kb.store.tables.reembed.models() == {table: TableModel(NEW, dim) for table in VECTOR_TABLES}
        keys = kb.store.vector_keys_sync("entities").tolist()
        assert kb.store.vectors_sync("entities", keys).shape == (len(keys), dim)
        answered = await query(client, query="Who leads the Orion project?", mode="local")
        assert "embedded_by" not in answered and answered["entities"]
        stats = await graph(client)
        assert stats["chunks"] == before["chunks"] + 1 and stats["index_sizes"]["chunks"] == stats["chunks"]
    await anyio.to_thread.run_sync(check_store, changed.data_dir, backend_of(changed.store))


@on_both_backends
async def test_each_base_says_which_command_fixes_it(settings: Settings, fake: FakeOllama, facts: KnownFacts,
                                                     live_upstream: str) -> None:
    async with gateway_client(settings, fake) as client:
        assert (await client.post("/rag/kbs", json={"name": "hr"})).status_code == 201
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])   # default
        hr = (await client.post("/rag/documents?kb=hr", json={"name": "city.md", "text": CITY})).json()
        hr_id = hr["documents"][0]["id"]
        with anyio.fail_after(20):
            while (await client.get(f"/rag/documents/{hr_id}?kb=hr")).json()["status"] != "processed":
                await anyio.sleep(0.02)
    add_model(fake, NEW, 128)
    changed = settings.replace(embed_model=NEW)
    async with gateway_client(changed, fake) as client:
        health = (await client.get("/rag/health?kb=hr")).json()
        assert any("`graphgate reindex --kb hr`" in p for p in health["problems"])
        assert mismatch_gauge((await client.get("/metrics")).text) == {("default", NEW, STORED): 3.0,
                                                                       ("hr", NEW, STORED): 3.0}
    hr_settings = await anyio.to_thread.run_sync(base_settings_sync, changed.replace(upstream=live_upstream), "hr")
    async with reindexing(hr_settings, "hr") as run:
        await run(lambda *_: None)
    async with gateway_client(changed, fake) as client:
        assert (await client.get("/rag/health?kb=hr")).json()["embedding"]["mismatched"] == []
        default = (await client.get("/rag/health")).json()   # a base at a time: default still waits
        assert default["embedding"]["mismatched"] == ["chunks", "entities", "relations"]
        assert any("`graphgate reindex`" in p for p in default["problems"])


@pytest.mark.parametrize("store_setting", ["postgresql"], indirect=True)
async def test_on_postgresql_a_reindex_beside_the_gateway_lets_it_go_on(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, live_upstream: str, store_setting: str) -> None:
    """A shared store needs no stop: `graphgate reindex` runs beside the gateway, whose waiting
    documents go on once the re-embedding's reload reaches it."""
    async with gateway_client(settings, fake) as client:
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])
    add_model(fake, NEW, 128)
    changed = settings.replace(embed_model=NEW)
    async with gateway_client(changed, fake) as client:
        waiting = await upload(client, "city.md", CITY)
        assert waiting["status"] == "pending" and "graphgate reindex" in waiting["waiting"]
        async with reindexing(changed.replace(upstream=live_upstream)) as run:
            await run(lambda *_: None)
        assert (await settle(client, waiting["id"]))["status"] == "processed"
        answered = await query(client, query="Where does Carol White live?", mode="local")
        assert "embedded_by" not in answered and answered["entities"]
        assert (await client.get("/rag/health")).json()["embedding"]["mismatched"] == []


# --- graphgate reindex, killed and run again ---

class HoldEmbeddings:
    """The fake upstream behind an ASGI wrapper: the embedding requests naming ``model`` after the
    first ``answered`` ones wait until ``released`` (``held`` is set when the first arrives)."""

    def __init__(self, app: Any, model: str, answered: int) -> None:
        self.app, self.model, self.answered = app, model, answered
        self.seen = 0
        self.held, self.released = threading.Event(), threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/embed" or self.released.is_set():
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if normalize(json.loads(body)["model"]) == normalize(self.model):
            self.seen += 1
            if self.seen > self.answered:
                self.held.set()
                while not self.released.is_set():
                    await anyio.sleep(0.02)
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def reindex_process(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "proxy", "reindex"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TIKTOKEN_CACHE_DIR": "", **env})


async def staged_and_models(settings: Settings) -> tuple[dict[str, int], dict[str, TableModel]]:
    store = await KnowledgeStore.open(settings.data_dir, backend=backend_of(settings.store))
    try:
        return await store.tables.reembed.staged_models(), await store.tables.reembed.models()
    finally:
        await store.close()


@on_both_backends
async def test_reindex_killed_mid_re_embedding_goes_on_where_it_stopped(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        for name, text in (("team.txt", TEAM), ("city.md", CITY)):
            await settle(client, (await upload(client, name, text))["id"])
        stats = await graph(client)
    rows = stats["chunks"] + stats["entities"] + stats["relations"]
    add_model(fake, NEW, 128)
    hold = HoldEmbeddings(fake.app, NEW, answered=5)   # the dimension probe, then four batches of one text
    fake.app = hold  # type: ignore[assignment]   # what FakeOllama.serve runs
    env = {"GRAPHGATE_DATA_DIR": str(settings.data_dir), "GRAPHGATE_STORE": settings.store,
           "GRAPHGATE_EMBED_MODEL": NEW, "GRAPHGATE_EMBED_BATCH": "1", "GRAPHGATE_EMBED_CONCURRENCY": "1"}
    with fake.serve() as url:
        env["GRAPHGATE_UPSTREAM"] = url
        first = reindex_process(env)
        try:
            assert await anyio.to_thread.run_sync(hold.held.wait, 60), "the re-embedding never reached its 6th call"
            first.send_signal(signal.SIGKILL)
        finally:
            first.wait(30)
            hold.released.set()
        staged, models = await staged_and_models(settings)
        assert staged == {NEW: 4}   # each batch staged in its own transaction: what was made is kept
        assert [models[table] for table in REEMBEDDED] == [TableModel(STORED, 64)] * 3   # the old vectors, whole
        await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))
        async with gateway_client(settings.replace(embed_model=NEW), fake) as client:   # and says so
            [problem] = [p for p in (await client.get("/rag/health")).json()["problems"] if NEW in p]
            assert f"a re-embedding with {NEW} was interrupted after 4 vectors" in problem

        made_before = len(embedded_texts(fake, NEW))
        second = reindex_process(env)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
    assert "re-embedded everything with other-embed" in err
    assert len(embedded_texts(fake, NEW)) - made_before == 1 + rows - 4   # the probe, and only what was missing
    staged, models = await staged_and_models(settings)
    assert staged == {} and models == {table: TableModel(NEW, 128) for table in VECTOR_TABLES}
    checked = await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))
    assert checked["entities"] == stats["entities"]


def test_ingest_says_why_documents_wait(tmp_path: Path, fake: FakeOllama, facts: KnownFacts,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``graphgate ingest`` does not wait for good on documents held back: it says why, and counts them."""
    from tests.test_cli_metadata import graphgate

    (tmp_path / "team.txt").write_text(TEAM)
    (tmp_path / "city.md").write_text(CITY)
    add_model(fake, NEW, 64)
    with fake.serve() as url:
        flags = ["--upstream", url, "--data-dir", str(tmp_path / "data"), "--port", str(silent_port())]
        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "team.txt"), "--create", *flags)
        assert status == 0 and "1 processed" in err, err
        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "city.md"), *flags, "--embed-model", NEW)
    assert status == 0 and "0 processed, 0 failed" in err and "1 waiting" in err, err
    assert "graphgate reindex" in err and STORED in err
