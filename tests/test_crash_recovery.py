"""A real graphgate process killed (SIGKILL) mid-ingestion loses nothing and does nothing twice."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store
from tests.servers import Server

NAMES = [f"Person{i:02d}" for i in range(12)]


def corpus(count: int) -> dict[str, str]:
    """Documents of several chunks each; every sentence names two people."""
    rng = random.Random(5)
    docs = {}
    for d in range(count):
        paragraphs = []
        for p in range(6):
            a, b = rng.sample(NAMES, 2)
            topic = rng.randint(0, 999)
            paragraphs.append(f"# Section {p}\n\n{a} met {b} in chapter {d}.{p} to talk about topic {topic}.")
        docs[f"doc{d}.md"] = "\n\n".join(paragraphs)
    return docs


@pytest.fixture
def upstream(fake: FakeOllama) -> Iterator[tuple[FakeOllama, KnownFacts]]:
    facts = KnownFacts({n: "Person" for n in NAMES})
    fake.structured = facts
    fake.reply_delay = 0.1
    with fake.serve() as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake, facts


def wait_all_processed(url: str, expected: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        documents = httpx.get(url + "/rag/documents", params={"limit": 1000}, timeout=30).json()["documents"]
        if len(documents) == expected and all(d["status"] == "processed" for d in documents):
            return documents
        assert not any(d["status"] == "failed" for d in documents), documents
        time.sleep(0.1)
    raise AssertionError("documents did not finish processing")


@pytest.mark.parametrize("kill_at_call", [3, 12])
def test_sigkill_mid_ingestion_then_restart(tmp_path: Path, upstream, kill_at_call: int) -> None:
    fake, facts = upstream
    docs = corpus(6)
    server = Server(tmp_path / "data", fake.url)
    acknowledged = {}
    for name, text in docs.items():
        response = httpx.post(server.url + "/rag/documents", json={"name": name, "text": text}, timeout=10)
        assert response.status_code == 202
        acknowledged[name] = response.json()["documents"][0]["id"]
    deadline = time.monotonic() + 30
    while facts.calls.count("extract") < kill_at_call and time.monotonic() < deadline:
        time.sleep(0.005)
    server.kill()
    extracted_before = facts.calls.count("extract")

    server = Server(tmp_path / "data", fake.url)
    documents = wait_all_processed(server.url, len(docs))
    assert {d["name"]: d["id"] for d in documents} == acknowledged
    stats = httpx.get(server.url + "/rag/stats", timeout=30).json()
    assert stats["index_sizes"] == {"chunks": stats["chunks"], "entities": stats["entities"],
                                    "relations": stats["relations"]}
    assert stats["graph"] == {"vertices": stats["entities"], "edges": stats["relations"]}
    assert server.stop() in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a graceful shutdown
    saved = {(tmp_path / "data" / f"{t}.gen").read_text().split()[0] for t in ("chunks", "entities", "relations")}
    assert saved == {str(stats["generation"])}  # the shutdown saved every index

    counts = check_store(tmp_path / "data")
    # every chunk extracted, none more than once per process: a kill repeats the calls in flight and
    # the answers not recorded yet. Those are not bounded: recorded without being awaited, they wait
    # behind a merge commit holding the store's one writer (86 of them with the writer held; bounding
    # them cost ingestion half its rate: see docs/performance.md). This test asserted at most 4 and
    # failed on that in two clean CI runs.
    passages = Counter(r.json["messages"][-1]["content"] for r in fake.requests_to("/api/chat")
                       if r.json and r.json["messages"][-1]["content"].startswith("Passage:"))
    chunk_total = sum(d["chunks_total"] for d in documents)
    assert len(passages) == chunk_total
    assert max(passages.values()) <= 2, passages.most_common(3)   # one kill: at most one repeat a chunk
    assert 0 < extracted_before < chunk_total, "the kill did not land mid-ingestion"
    # nothing merged twice: each relation's weight is exactly its number of source chunks
    con = duckdb.connect(str(tmp_path / "data" / "graphgate.duckdb"), read_only=True)
    rows = con.execute("SELECT weight, len(source_ids) FROM relations").fetchall()
    con.close()
    assert rows and all(weight == sources for weight, sources in rows)
    assert counts["entities"] == len({n for text in docs.values() for n in NAMES if n in text})
