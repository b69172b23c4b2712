"""SIGKILL during a knowledge base's deletion (issue 20): a real ``python -m proxy serve`` is killed at
increasing delays after ``DELETE /rag/kbs/x?confirm=x`` was written to its socket (plain timing, no
test hook: the deletion closes the open base, renames its directory to a tombstone, rewrites the list
and removes the tombstone, 20-30 ms here from request to response), restarted, and each time base x
is either wholly there (listed, opens, the same documents and chunks, a query answers from them) or
wholly gone (not listed, no directory, no tombstone), and the other bases are untouched."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.knowledge.bases import BASES_DIR, TOMBSTONE
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.servers import Server
from tests.test_crash_recovery import NAMES, corpus

# the kills: at once (before the deletion starts), then STEP later each time until one lands after it
STEP = 0.004
MAX_DELAY = 0.5
DOCUMENTS = {"x": 10, "y": 3, "default": 2}


@pytest.fixture
def upstream(fake: FakeOllama) -> Iterator[str]:
    fake.structured = KnownFacts({n: "Person" for n in NAMES})
    with fake.serve() as url:
        yield url


def snapshot(url: str, kb: str) -> dict[str, Any]:
    """What must survive: the base's documents (name, status) and its counts."""
    documents = httpx.get(f"{url}/rag/documents", params={"kb": kb, "limit": 1000}, timeout=10).json()["documents"]
    stats = httpx.get(f"{url}/rag/stats", params={"kb": kb}, timeout=10).json()
    return {"documents": sorted((d["name"], d["status"]) for d in documents),
            "counts": (stats["chunks"], stats["entities"], stats["relations"])}


def ingest_all(url: str) -> None:
    httpx.post(f"{url}/rag/kbs", json={"name": "x"}, timeout=10).raise_for_status()
    httpx.post(f"{url}/rag/kbs", json={"name": "y"}, timeout=10).raise_for_status()
    texts = corpus(sum(DOCUMENTS.values()))
    names = iter(sorted(texts))
    for kb, count in DOCUMENTS.items():
        for _ in range(count):
            name = next(names)
            response = httpx.post(f"{url}/rag/documents", params={"kb": kb}, json={"name": name, "text": texts[name]},
                                  timeout=10)
            assert response.status_code == 202, response.text
    deadline = time.monotonic() + 30
    for kb, count in DOCUMENTS.items():
        while True:
            documents = snapshot(url, kb)["documents"]
            if len(documents) == count and all(status == "processed" for _, status in documents):
                break
            assert time.monotonic() < deadline, documents
            time.sleep(0.05)


def send_delete(server: Server) -> socket.socket:
    """The DELETE written on a connection made beforehand: the delay counts from the request's bytes."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(f"DELETE /rag/kbs/x?confirm=x HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                 "Content-Length: 0\r\n\r\n".encode())
    return sock


def check_after_restart(server: Server, data: Path, before: dict[str, dict[str, Any]], delay: float) -> bool:
    """Whether x is there (wholly) or not (wholly gone); the other bases untouched either way."""
    listed = [b["name"] for b in httpx.get(f"{server.url}/rag/kbs", timeout=10).json()["kbs"]]
    root = data / BASES_DIR
    assert [p.name for p in root.iterdir() if p.name.startswith(TOMBSTONE)] == [], delay
    assert sorted(set(listed) - {"x"}) == ["default", "y"], listed
    for kb in ("y", "default"):
        assert snapshot(server.url, kb) == before[kb], (delay, kb)
    if "x" not in listed:
        assert not (root / "x").exists(), delay
        assert httpx.get(f"{server.url}/rag/documents", params={"kb": "x"}, timeout=10).status_code == 404
        return False
    assert (root / "x").is_dir()
    assert snapshot(server.url, "x") == before["x"], delay   # opens it, as the next deletion needs
    answer = httpx.post(f"{server.url}/rag/query", params={"kb": "x"},
                        json={"query": f"Who did {NAMES[0]} meet?", "mode": "local"}, timeout=10)
    assert answer.status_code == 200, answer.text
    found = {d for chunk in answer.json()["chunks"] for d in chunk["documents"]}
    assert found and found <= {name for name, _ in before["x"]["documents"]}, delay
    return True


def test_a_deletion_killed_at_any_point_leaves_the_whole_base_or_none(tmp_path: Path, upstream: str) -> None:
    started = time.monotonic()
    data = tmp_path / "data"
    server = Server(data, upstream)
    outcomes: list[tuple[float, str]] = []
    try:
        ingest_all(server.url)
        before = {kb: snapshot(server.url, kb) for kb in DOCUMENTS}
        assert before["x"]["counts"][0] >= 25   # enough chunks for the deletion to take a while
        delay = 0.0
        while True:   # later and later kills, each after a restart, until one finds the deletion done
            with send_delete(server):
                time.sleep(delay)
                server.kill()
            server = Server(data, upstream)
            whole = check_after_restart(server, data, before, delay)
            outcomes.append((delay, "whole" if whole else "gone"))
            if not whole:
                break
            delay += STEP
            assert delay <= MAX_DELAY, f"the deletion never finished before a kill: {outcomes}"
    finally:
        server.kill()
    print("outcomes", outcomes, f"{time.monotonic() - started:.1f} s")
    assert outcomes[0] == (0.0, "whole"), outcomes   # a kill at once: the deletion had not begun
