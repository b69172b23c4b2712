"""Nothing blocks the event loop: while a merge commit is held open, in its database transaction
and then in its vector-index inserts, the gateway keeps answering (GraphGate and the fake upstream
on real uvicorn servers; the commit is slowed inside the store's own worker thread)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from admin.rendering import ref
from proxy.app import create_app
from proxy.core.settings import Settings
from proxy.store import vectors_usearch
from proxy.store.duckdb import tables as duckdb_tables
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread

HOLD = 1.2      # seconds each phase of the commit is held open
BOUND = 0.05    # what a request may take meanwhile


class HeldCommit:
    """Slows the next commit: its transaction, then its vector inserts, each by HOLD seconds;
    ``phase`` says which one is being held right now."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.phase: str | None = None
        self.phases_seen: list[str] = []
        write_changes = duckdb_tables.write_changes
        add = vectors_usearch.VectorIndex.add

        def slow_write(con, changes):
            result = write_changes(con, changes)
            if self.armed:
                self._hold("transaction")
            return result

        def slow_add(index, keys, vectors):
            add(index, keys, vectors)
            if self.armed and "transaction" in self.phases_seen and "vector inserts" not in self.phases_seen:
                self._hold("vector inserts")

        monkeypatch.setattr(duckdb_tables, "write_changes", slow_write)
        monkeypatch.setattr(vectors_usearch.VectorIndex, "add", slow_add)

    def _hold(self, phase: str) -> None:
        self.phase = phase
        self.phases_seen.append(phase)
        time.sleep(HOLD)
        self.phase = None


@pytest.fixture
def gateway(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> Iterator[str]:
    with fake.serve() as upstream, serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        yield url


def _processed(client: httpx.Client, name: str, text: str) -> None:
    document = client.post("/rag/documents", json={"name": name, "text": text}).json()["documents"][0]
    deadline = time.monotonic() + 20
    while client.get(f"/rag/documents/{document['id']}").json()["status"] != "processed":
        assert time.monotonic() < deadline, "the document was not processed"
        time.sleep(0.02)


def test_a_held_merge_commit_stalls_no_page_no_stream_and_no_entity_lookup(
        gateway: str, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    with httpx.Client(base_url=gateway, timeout=30) as client:
        _processed(client, "team.md", TEAM)
        held = HeldCommit(monkeypatch)

        # a chat streaming a line every 50 ms, started before the commit
        fake.chunk_delay = 0.05
        fake.reply = [f"w{i} " for i in range(200)]
        arrivals: list[float] = []

        def stream() -> None:
            body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "/bypass hello"}]}
            with httpx.Client(base_url=gateway, timeout=30) as streamer:
                with streamer.stream("POST", "/api/chat", json=body) as response:
                    for line in response.iter_lines():
                        if line:
                            json.loads(line)
                            arrivals.append(time.monotonic())

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        while not arrivals:
            time.sleep(0.01)

        merged: list[httpx.Response] = []
        held.armed = True
        merger = threading.Thread(target=lambda: merged.append(httpx.post(
            f"{gateway}/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"}, timeout=30)), daemon=True)
        merger.start()

        timings: dict[str, list[tuple[str, float]]] = {"transaction": [], "vector inserts": []}
        held_windows: list[tuple[float, float]] = []
        for phase in ("transaction", "vector inserts"):
            deadline = time.monotonic() + 10
            while held.phase != phase:
                assert time.monotonic() < deadline, f"the merge commit never reached its {phase}"
                time.sleep(0.005)
            start = time.monotonic()
            while held.phase == phase and time.monotonic() - start < HOLD - 0.3:
                for name, path in (("GET /", "/"), ("entity page", f"/admin/entities/{ref('bob jones')}")):
                    sent = time.monotonic()
                    response = client.get(path)
                    assert response.status_code == 200, response.text
                    timings[phase].append((name, time.monotonic() - sent))
                time.sleep(0.02)
            held_windows.append((start, time.monotonic()))

        merger.join(timeout=30)
        assert merged and merged[0].status_code == 200, merged and merged[0].text
        assert held.phases_seen == ["transaction", "vector inserts"]
        streamer.join(timeout=30)

    for phase, measured in timings.items():
        assert {name for name, _ in measured} == {"GET /", "entity page"}
        slow = [(name, round(seconds * 1000)) for name, seconds in measured if seconds > BOUND]
        assert not slow, f"while the commit's {phase} was held, these took over 50 ms: {slow}"
    # the stream's next line kept coming every ~50 ms through both held phases
    for start, end in held_windows:
        during = [t for t in arrivals if start <= t <= end]
        assert len(during) >= 2
        gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
        assert max(gaps) <= fake.chunk_delay + BOUND, f"a streamed line waited {max(gaps) * 1000:.0f} ms"
