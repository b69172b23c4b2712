"""Log lines that must not cry wolf: an empty store is not "repaired" at every start, and a client
that read its stream to the end did not "go away" (issue "Works on a fresh machine", item 7).

Both are checked with the real engines and, for streams, real uvicorn servers and the official
ollama-python client; the records are caught with ``caplog`` (uvicorn's threads log to it too).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import numpy as np
import ollama
import pytest
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.app import Settings, create_app
from proxy.store.changes import Changeset, ChunkRow, EntityRow, RelationRow, pair_key
from proxy.store.store import KnowledgeStore
from tests.conftest import running
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread

MODEL = "llama3.2:latest"
OUT_OF_STEP = "out of step with the tables"
WENT_AWAY = "client went away"
DIM = 8


def records(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and r.levelno >= logging.INFO]


# --- the store: "vector index ... was out of step with the tables and has been repaired" ---


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def some_rows() -> Changeset:
    s, t = "alice", "bob"
    return Changeset(
        chunks_added=[ChunkRow("c1", "Alice met Bob.", 4, vec(1))],
        entities_upserted=[EntityRow("alice", "Alice", "Person", "a person", ["c1"], "h1", vec(2)),
                           EntityRow("bob", "Bob", "Person", "a person", ["c1"], "h2", vec(3))],
        relations_upserted=[RelationRow(pair_key(s, t), s, t, ["met"], "Alice met Bob", 1.0, ["c1"], "r1", vec(4))],
    )


def no_rows() -> Changeset:
    return Changeset(chunks_removed=["c1"], entities_removed=["alice", "bob"],
                     relations_removed=[pair_key("alice", "bob")])


async def reopen(path: Path) -> KnowledgeStore:
    store = await KnowledgeStore.open(path)
    await store.close()
    return store


@pytest.mark.anyio
async def test_an_empty_store_starts_twice_without_repairing_anything(
        settings: Settings, fake: FakeOllama, caplog: pytest.LogCaptureFixture) -> None:
    """A fresh store has no embedding dimension and so no index files; the old check took every
    index it could not load for one out of step, at every start."""
    caplog.set_level(logging.INFO, logger="graphgate")
    for _ in range(2):
        async with running(create_app(settings, upstream_transport=fake.transport())):
            pass
    assert (settings.data_dir / "graphgate.duckdb").exists()
    assert records(caplog, OUT_OF_STEP) == []


@pytest.mark.anyio
async def test_only_an_index_that_really_was_out_of_step_is_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="graphgate.store")
    await reopen(tmp_path)
    await reopen(tmp_path)
    assert records(caplog, OUT_OF_STEP) == []  # empty, no index files

    store = await KnowledgeStore.open(tmp_path)
    await store.apply(some_rows())
    await store.close()
    await reopen(tmp_path)
    assert records(caplog, OUT_OF_STEP) == []  # rows, and index files that match them

    (tmp_path / "chunks.usearch").unlink()  # a missing index for a table with rows
    store = await reopen(tmp_path)
    assert [r.getMessage() for r in records(caplog, OUT_OF_STEP)] == [
        "vector index chunks was out of step with the tables and has been repaired"]
    assert store.vector_count("chunks") == 1
    caplog.clear()
    await reopen(tmp_path)  # the repaired index was saved
    assert records(caplog, OUT_OF_STEP) == []

    (tmp_path / "entities.gen").write_text("0\ni8-scaled\n")  # a stale index (a crash before its save)
    await reopen(tmp_path)
    assert [r.getMessage() for r in records(caplog, OUT_OF_STEP)] == [
        "vector index entities was out of step with the tables and has been repaired"]

    caplog.clear()
    store = await KnowledgeStore.open(tmp_path)
    await store.apply(no_rows())  # empty again, with index files (empty ones) that match
    await store.close()
    store = await reopen(tmp_path)
    assert all((tmp_path / f"{name}.usearch").exists() for name in ("chunks", "entities", "relations"))
    assert {name: store.vector_count(name) for name in ("chunks", "entities", "relations")} == {
        "chunks": 0, "entities": 0, "relations": 0}
    (tmp_path / "relations.usearch").unlink()  # an empty table's missing index has nothing to repair
    await reopen(tmp_path)
    assert records(caplog, OUT_OF_STEP) == []


# --- the relay: "client went away during /api/chat; closing the upstream request" ---


def wait_for(condition, seconds: float = 30.0) -> bool:   # the seconds only end a wait that would never end
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_completed_ollama_python_streams_are_not_a_client_going_away(
        fake: FakeOllama, live_gateway: str, caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn answers ``receive()`` with ``http.disconnect`` once a response has ended; the relay
    took that for the client leaving, after every stream read to its end. A client that really
    leaves mid-stream is still reported, once, and its upstream request closed."""
    caplog.set_level(logging.INFO, logger="graphgate")
    client = ollama.Client(host=live_gateway)
    for _ in range(3):
        parts = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True))
        assert parts[-1].done and "".join(p.message.content or "" for p in parts) == "".join(fake.reply)
    assert list(client.generate(model=MODEL, prompt="hi", stream=True))[-1].done
    assert all(event.completed for event in fake.stream_events)

    fake.chunk_delay = 0.2
    fake.reply = [f"w{i} " for i in range(30)]
    with httpx.Client(base_url=live_gateway, timeout=30) as http:
        with http.stream("POST", "/api/chat", json={"model": MODEL, "messages": [
                {"role": "user", "content": "hi"}]}) as response:
            lines = response.iter_lines()
            next(lines)
            next(lines)
    assert wait_for(lambda: records(caplog, WENT_AWAY))
    event = fake.stream_events[-1]
    assert wait_for(lambda: event.ended is not None)
    assert event.completed is False and event.ended is not None   # closed, not run to its end (6 s)
    time.sleep(0.2)  # anything the earlier streams would log is long out
    assert [r.getMessage() for r in records(caplog, WENT_AWAY)] == [
        "client went away during /api/chat; closing the upstream request"]


class LingeringUpstream:
    """An upstream whose /api/chat stream sends its ``"done": true`` line and then takes a while to
    end the body; everything else is the fake Ollama's."""

    def __init__(self, fake: FakeOllama) -> None:
        self.fake = fake
        self.ended: float | None = None
        self.ran_out = False   # the body ended on its own rather than being closed by the gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/chat":
            return await self.fake.app(scope, receive, send)

        async def body() -> AsyncIterator[bytes]:
            try:
                for piece in ("Hello", " there"):
                    yield json.dumps({"model": MODEL, "message": {"role": "assistant", "content": piece},
                                      "done": False}).encode() + b"\n"
                yield json.dumps({"model": MODEL, "message": {"role": "assistant", "content": ""},
                                  "done_reason": "stop", "done": True}).encode() + b"\n"
                await anyio.sleep(60)
                self.ran_out = True
            finally:
                self.ended = time.monotonic()

        await StreamingResponse(body(), media_type="application/x-ndjson")(scope, receive, send)


def test_a_client_that_hangs_up_after_the_done_line_did_not_go_away(
        fake: FakeOllama, settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """Some clients stop reading at ``"done": true``: the answer is whole even though the relay is
    still waiting for the upstream's body end. The upstream request is still closed at once."""
    caplog.set_level(logging.INFO, logger="graphgate")
    upstream = LingeringUpstream(fake)
    with serve_in_thread(upstream, lifespan="off") as upstream_url, \
            serve_in_thread(create_app(settings.replace(upstream=upstream_url))) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        with http.stream("POST", "/api/chat", json={"model": MODEL, "messages": [
                {"role": "user", "content": "hi"}]}) as response:
            for line in response.iter_lines():
                if json.loads(line)["done"]:
                    break
        assert wait_for(lambda: upstream.ended is not None)
        assert not upstream.ran_out   # closed by the gateway, long before its body would end
        time.sleep(0.2)
    assert records(caplog, WENT_AWAY) == []
