"""Several GraphGate replicas on one PostgreSQL (issue 21), as real ``python -m proxy serve``
processes in front of the fake Ollama: documents uploaded through one are answered by the other; a
replica killed mid-ingestion leaves its documents to the other, with nothing lost and no chunk
extracted twice (but those sent before the kill); a PostgreSQL restart mid-ingestion is survived.

Where the kill or the restart lands is not left to timing: the fake upstream lets the first few
extractions through and holds the rest (``ThreadGate``) until the kill or restart has happened."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.store.backends import postgresql, schema_name
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, ThreadGate
from tests.invariants import check_store
from tests.servers import Server
from tests.store_backends import restart_pg
from tests.test_crash_recovery import NAMES, corpus

LEASE = "1.5"   # seconds: a dead replica's documents are taken over this long after its last renewal
HANG_GUARD = 90   # seconds a wait may last: only a wait that would never end lasts this long


@pytest.fixture
def upstream(fake: FakeOllama) -> Iterator[tuple[FakeOllama, KnownFacts]]:
    facts = KnownFacts({n: "Person" for n in NAMES})
    fake.structured = facts
    fake.reply_delay = 0.05
    with fake.serve() as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake, facts


@pytest.fixture
def kb(pg_server: str) -> Iterator[str]:
    """A base name of this test's own (its schema is dropped afterwards)."""
    import uuid

    import psycopg

    from proxy.store.postgres.schema import drop
    from tests.store_backends import base_schemas

    name = f"t{uuid.uuid4().hex[:10]}"
    before = base_schemas(pg_server)
    yield name
    with psycopg.connect(pg_server, autocommit=True) as con:   # default's too: the replicas made it
        for schema in base_schemas(pg_server) - before | {schema_name(name)}:
            drop(con, schema)


def url_of(fake: FakeOllama) -> str:
    return str(fake.url)  # type: ignore[attr-defined]  # set by the ``upstream`` fixture


def replica(data: Path, upstream: str, store: str, **settings: str) -> Server:
    return Server(data, upstream, GRAPHGATE_STORE=store, GRAPHGATE_INGEST_LEASE_SECONDS=LEASE, **settings)


def create_base(url: str, kb: str) -> None:
    response = httpx.post(f"{url}/rag/kbs", json={"name": kb}, timeout=30)
    assert response.status_code == 201, response.text


def wait_for_base(url: str, kb: str, timeout: float = 30) -> None:
    """Until the replica at ``url`` lists base ``kb`` (made through another: the list is shared)."""
    deadline = time.monotonic() + timeout
    while kb not in [b["name"] for b in httpx.get(f"{url}/rag/kbs", timeout=30).json()["kbs"]]:
        assert time.monotonic() < deadline, f"{url} does not know knowledge base {kb}"
        time.sleep(0.05)


def upload(url: str, kb: str, docs: dict[str, str]) -> dict[str, str]:
    ids = {}
    for name, text in docs.items():
        response = httpx.post(f"{url}/rag/documents", params={"kb": kb}, json={"name": name, "text": text}, timeout=30)
        assert response.status_code == 202, response.text
        ids[name] = response.json()["documents"][0]["id"]
    return ids


def documents_of(url: str, kb: str) -> list[dict[str, Any]]:
    return httpx.get(f"{url}/rag/documents", params={"kb": kb, "limit": 1000}, timeout=30).json()["documents"]


def wait_processed(url: str, kb: str, expected: int, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            documents = documents_of(url, kb)
        except (httpx.HTTPError, KeyError):   # the server restarting under it: ask again
            time.sleep(0.2)
            continue
        if len(documents) == expected and all(d["status"] == "processed" for d in documents):
            return documents
        assert not any(d["status"] == "failed" for d in documents), documents
        time.sleep(0.1)
    raise AssertionError(f"documents did not finish: {documents_of(url, kb)}")


def passages(fake: FakeOllama) -> Counter[str]:
    """Extraction calls by the chunk they extracted."""
    return Counter(r.json["messages"][-1]["content"] for r in fake.requests_to("/api/chat")
                   if r.json and r.json["messages"][-1]["content"].startswith("Passage:"))


def chunks_done(url: str, kb: str) -> int:
    """Chunks whose extraction is committed, over the base's documents."""
    return sum(d["chunks_done"] for d in documents_of(url, kb))


def wait_until(condition: Callable[[], object], what: str, timeout: float = HANG_GUARD) -> None:
    """Polls ``condition``; ``timeout`` only ends a wait that would otherwise never end."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.01)


def stats(url: str, kb: str) -> dict[str, Any]:
    return httpx.get(f"{url}/rag/stats", params={"kb": kb}, timeout=30).json()


def test_documents_uploaded_through_one_replica_are_answered_by_the_other(
        tmp_path: Path, upstream: tuple[FakeOllama, KnownFacts], pg_server: str, kb: str) -> None:
    fake, _ = upstream
    docs = corpus(4)
    first = replica(tmp_path / "a", url_of(fake), pg_server)
    second = replica(tmp_path / "b", url_of(fake), pg_server)
    try:
        create_base(first.url, kb)
        wait_for_base(second.url, kb)   # made through the first: the list of bases is shared
        ids = upload(first.url, kb, docs)
        documents = wait_processed(second.url, kb, len(docs))
        assert {d["name"]: d["id"] for d in documents} == ids
        # the second replica's graph and rows follow the first's commits
        deadline = time.monotonic() + 30
        while stats(second.url, kb)["generation"] != stats(first.url, kb)["generation"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        a, b = stats(first.url, kb), stats(second.url, kb)
        for field in ("chunks", "entities", "relations", "graph", "index_sizes", "generation"):
            assert a[field] == b[field], field
        assert b["graph"] == {"vertices": b["entities"], "edges": b["relations"]}
        health = httpx.get(f"{second.url}/rag/health", params={"kb": kb}, timeout=30).json()
        assert health["status"] == "ok" and health["problems"] == [], health
        assert health["store"]["writable"] is True and health["store"]["free_bytes"] is None
        assert health["store"]["stored_bytes"] > 0 and health["store"]["documents"]["processed"] == len(docs)
        person = next(n for n in NAMES if n in docs["doc0.md"])
        answer = httpx.post(f"{second.url}/rag/query", params={"kb": kb},
                            json={"query": f"Who did {person} meet?", "mode": "local"}, timeout=30)
        assert answer.status_code == 200 and person in answer.text, answer.text
        # a chat through the second replica is grounded in the base; its trace is shared with the first
        model = httpx.put(f"{second.url}/rag/models/team", json={"model": "llama3.2", "kb": kb}, timeout=30)
        assert model.status_code in (200, 201), model.text
        chat = httpx.post(f"{second.url}/api/chat", json={
            "model": "team", "stream": False, "messages": [{"role": "user", "content": f"Who is {person}?"}]},
            timeout=30)
        assert chat.status_code == 200 and chat.json()["model"] == "team", chat.text
        deadline = time.monotonic() + 30   # traces are written in the background
        while not any(t["query"] == f"Who is {person}?" and t["augmented"] for t in
                      httpx.get(f"{first.url}/rag/traces", params={"kb": kb}, timeout=30).json()["traces"]):
            assert time.monotonic() < deadline, "the second replica's trace is not seen by the first"
            time.sleep(0.05)
    finally:
        first.stop()
        second.stop()
    counts = check_store(tmp_path / "check", postgresql(pg_server, schema_name(kb)))
    assert counts["entities"] == len({n for text in docs.values() for n in NAMES if n in text})


def relation_weights(pg_server: str, kb: str) -> list[tuple[float, int]]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_server) as con:
        return con.execute(sql.SQL("SELECT weight, cardinality(source_ids) FROM {}.relations").format(
            sql.Identifier(schema_name(kb)))).fetchall()


def test_sigkill_of_a_replica_mid_ingestion_leaves_its_documents_to_the_other(
        tmp_path: Path, upstream: tuple[FakeOllama, KnownFacts], pg_server: str, kb: str) -> None:
    fake, _ = upstream
    docs = corpus(8)
    gate = fake.hold_structured = ThreadGate(pass_first=6)   # six extractions answered, the rest held
    first = replica(tmp_path / "a", url_of(fake), pg_server)
    second = replica(tmp_path / "b", url_of(fake), pg_server)
    try:
        create_base(first.url, kb)
        wait_for_base(second.url, kb)
        ids = upload(first.url, kb, docs)
        # the kill lands mid-ingestion: some extractions committed, others asked and not answered
        wait_until(lambda: gate.passed == 6 and gate.held > 0 and chunks_done(second.url, kb) > 0,
                   "six extractions answered, one of them committed, and another one asked")
        first.kill()
        sent_before = passages(fake)
        gate.open()
        documents = wait_processed(second.url, kb, len(docs))
        assert {d["name"]: d["id"] for d in documents} == ids
        chunk_total = sum(d["chunks_total"] for d in documents)
        assert 0 < len(sent_before) < chunk_total, "the kill did not land mid-ingestion"
        # every chunk extracted; twice only if its first call was sent before the kill (answered or not
        # by then, its extraction was not committed when the replica died), and never every one of those
        extracted = passages(fake)
        assert len(extracted) == chunk_total
        redone = {passage for passage, calls in extracted.items() if calls > 1}
        assert redone <= set(sent_before), "a chunk first asked for after the kill was extracted twice"
        assert all(calls <= 2 for calls in extracted.values()), extracted.most_common(3)
        assert len(redone) < len(sent_before), "every extraction made before the kill was made again"
        final = stats(second.url, kb)
        assert final["graph"] == {"vertices": final["entities"], "edges": final["relations"]}
    finally:
        gate.open()
        second.stop()
    # nothing merged twice: each relation's weight is exactly its number of source chunks
    weights = relation_weights(pg_server, kb)
    assert weights and all(weight == sources for weight, sources in weights)
    counts = check_store(tmp_path / "check", postgresql(pg_server, schema_name(kb)))
    assert counts["entities"] == len({n for text in docs.values() for n in NAMES if n in text})


def test_a_postgresql_restart_mid_ingestion_is_survived(
        tmp_path: Path, upstream: tuple[FakeOllama, KnownFacts], pg_server: str, kb: str) -> None:
    fake, _ = upstream
    docs = corpus(6)
    gate = fake.hold_structured = ThreadGate(pass_first=4)   # four extractions answered, the rest held
    first = replica(tmp_path / "a", url_of(fake), pg_server)
    second = replica(tmp_path / "b", url_of(fake), pg_server)
    try:
        create_base(first.url, kb)
        wait_for_base(second.url, kb)
        ids = upload(first.url, kb, docs)
        # the restart lands mid-ingestion: extractions answered before it, others waiting to be answered
        wait_until(lambda: gate.passed == 4 and gate.held > 0, "four extractions answered and another one asked")
        restart_pg(pg_server)
        answered_before = gate.passed
        gate.open()
        documents = wait_processed(first.url, kb, len(docs))
        assert {d["name"]: d["id"] for d in documents} == ids
        assert answered_before < sum(d["chunks_total"] for d in documents), "the restart came after the work"
        # the second replica's follower reconnected: it catches up with the first's commits
        wait_until(lambda: stats(second.url, kb)["generation"] == stats(first.url, kb)["generation"],
                   "the second replica to follow the first after the restart")
        assert stats(second.url, kb)["graph"] == stats(first.url, kb)["graph"]
    finally:
        gate.open()
        first.stop()
        second.stop()
    weights = relation_weights(pg_server, kb)
    assert weights and all(weight == sources for weight, sources in weights)
    check_store(tmp_path / "check", postgresql(pg_server, schema_name(kb)))
