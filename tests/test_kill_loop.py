"""SIGKILL at random moments during ingestion, deletion and curation, in a loop of real processes.

Each iteration starts ``python -m proxy serve`` on the same data directory, runs a random mix of
operations over the JSON API (uploads of new documents, duplicate uploads of earlier texts,
deletion of a processed document, /rag/merge of two entities, an entity edit) while the pipeline
works through a slow scripted model, and SIGKILLs the process at a random moment: after a random
delay, after the model has seen k more extraction calls, right after a document merge asked for
its embeddings (so the kill lands in the merge commit), or just after one of the requests was sent.
Then, on a copy of the dead process's files:

* ``check_store`` (tests/invariants.py): DuckDB, USearch and igraph agree in counts and ids, no
  entity or relation without a live source chunk, no duplicate entity;
* every acknowledged upload (and every unacknowledged one that was stored anyway) is there, not
  failed, once; every acknowledged deletion stayed deleted; nothing else exists; a processed
  document has all its chunks extracted and linked;
* the aliases are exactly those of the merges that happened, no merged-away name exists as an
  entity, every hand edit is still applied;
* no chunk is sent to the model again after its extraction was stored, and no chunk twice in
  one process's life.

The next iteration's restart is checked live too (index sizes and graph equal the table counts).
At the end everything is allowed to finish, the process is stopped with SIGTERM, and the final
graph (entity keys, types and source chunks; relation pairs, weights and source chunks) must equal
both the model of the operations that took effect and a clean, never-killed run of the same
operations on a fresh data directory: a document merged twice would show in the weights.

The CI run uses 6 kill points (about a minute). The long run, at least 20 kill points:

    GRAPHGATE_KILL_POINTS=20 TIKTOKEN_CACHE_DIR= python -m pytest -q -s tests/test_kill_loop.py

``-s`` prints what was killed where for every kill point and a summary of the cases;
``GRAPHGATE_KILL_SEED`` changes the operation mix (the moments differ from run to run anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from proxy.core.settings import Settings
from proxy.extraction.results import name_key
from proxy.parsing.files import parse_document
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store
from tests.reliability_harness import (
    GRACEFUL_EXIT_CODES,
    NAMES,
    Gateway,
    ScriptedUpstream,
    StoreState,
    client_port,
    document,
    read_state,
    snapshot,
    wait_until,
)

KILL_POINTS = int(os.environ.get("GRAPHGATE_KILL_POINTS", "6"))
SEED = int(os.environ.get("GRAPHGATE_KILL_SEED", "1606"))
TRIGGERS = ("timer", "extract", "doc-merge", "request")
IDLE_FALLBACK = 2.0  # seconds after the last operation: kill anyway (the work ran out)


def document_id(name: str, text: str) -> str:
    parsed = parse_document(name, text.encode(), max_bytes=10**8)
    return "doc-" + hashlib.sha256(parsed.text.encode()).hexdigest()


@dataclass
class Op:
    kind: str                 # upload | delete | merge | edit
    args: dict[str, Any]
    outcome: str = "not sent"  # acknowledged | refused | in doubt | not sent
    status: int | None = None
    body: Any = None
    sent_at: float | None = None

    def describe(self) -> str:
        a = self.args
        if self.kind == "upload":
            return f"upload {a['name']}" + (" (a duplicate text)" if a.get("duplicate") else "")
        if self.kind == "delete":
            return f"delete {a['name']}"
        if self.kind == "merge":
            return f"merge {'+'.join(a['entities'])} -> {a['target']}"
        return f"edit {a['entity']} type={a['type']}"

    def send(self, client: httpx.Client) -> httpx.Response:
        a = self.args
        if self.kind == "upload":
            return client.post("/rag/documents", json={"name": a["name"], "text": a["text"]})
        if self.kind == "delete":
            return client.delete(f"/rag/documents/{a['id']}")
        if self.kind == "merge":
            return client.post("/rag/merge", json={"entities": a["entities"], "target": a["target"]})
        return client.patch(f"/rag/entities/{a['entity']}", json={"type": a["type"]})


@dataclass
class Model:
    """What the operations that took effect should have produced."""
    texts: dict[str, str] = field(default_factory=dict)        # document id -> text (every upload ever)
    live: dict[str, str] = field(default_factory=dict)         # document id -> name
    aliases: dict[str, str] = field(default_factory=dict)      # merged-away key -> target key
    types: dict[str, str] = field(default_factory=dict)        # entity key -> hand-edited type
    log: list[Op] = field(default_factory=list)                # the operations that took effect, in order

    def resolve(self, name: str) -> str:
        key = name_key(name)
        return self.aliases.get(key, key)

    def apply(self, op: Op, state: StoreState | None = None) -> None:
        """Record an acknowledged operation, or an unacknowledged one ``state`` shows took effect."""
        a = op.args
        if op.kind == "upload":
            doc = a["id"]
            if op.outcome == "acknowledged":
                outcome = op.body["documents"][0]["outcome"]
                assert outcome in ("accepted", "duplicate"), op.body
                if outcome == "duplicate":
                    assert doc in self.live, f"{a['name']}: a duplicate of a document that was deleted"
                    return
            elif doc in self.live or state is None or doc not in state.documents:
                return
            self.texts[doc] = a["text"]
            self.live[doc] = a["name"]
        elif op.kind == "delete":
            if op.outcome != "acknowledged" and (state is None or a["id"] in state.documents):
                return
            self.live.pop(a["id"])
        elif op.kind == "merge":
            target = name_key(a["target"])
            merged = [k for k in map(name_key, a["entities"]) if k != target]
            if op.outcome != "acknowledged" and (state is None or state.aliases.get(merged[0]) != target):
                return
            for alias, points_to in list(self.aliases.items()):
                if points_to in merged:
                    self.aliases[alias] = target
            for key in merged:
                self.aliases[key] = target
                self.types.pop(key, None)  # a merged-away name's edit goes with it
            self.aliases.pop(target, None)
        else:
            key = name_key(a["entity"])
            if op.outcome != "acknowledged" and (
                    state is None or (state.entity_edits.get(key) or {}).get("type") != a["type"]):
                return
            self.types[key] = a["type"]
        self.log.append(op)

    def expected_graph(self) -> tuple[set[str], set[tuple[str, str]]]:
        """Entity keys and relation pairs of the live documents under the aliases (a perfect model
        extracts every name in a sentence, and a relation between two names in one sentence)."""
        from tests.extractor import KnownFacts

        facts = KnownFacts({n: "Person" for n in NAMES})
        entities, relations = set(), set()
        for doc in self.live:
            for sentence in facts.sentences(self.texts[doc]):
                keys = [self.resolve(n) for n in facts.names_in(sentence)]
                entities.update(keys)
                for i, x in enumerate(keys):
                    for y in keys[i + 1:]:
                        if x != y:
                            relations.add((min(x, y), max(x, y)))
        return entities, relations


class Runner(threading.Thread):
    """Sends the iteration's operations one after another, with random pauses, until stopped."""

    def __init__(self, url: str, ops: list[Op], rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.ops, self.rng = url, ops, rng
        self.stop = threading.Event()
        self.current: Op | None = None
        self.finished_at: float | None = None

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for op in self.ops:
                if self.stop.is_set():
                    break
                self.current = op
                op.sent_at = time.monotonic()
                try:
                    response = op.send(client)
                except httpx.HTTPError:
                    op.outcome = "in doubt"  # the kill: it may or may not have taken effect
                    break
                op.status = response.status_code
                op.body = response.json()
                op.outcome = "acknowledged" if response.is_success else "refused"
                self.current = None
                if self.stop.wait(self.rng.uniform(0, 0.4)):
                    break
        self.current = None
        self.finished_at = time.monotonic()


@dataclass
class KillPoint:
    iteration: int
    trigger: str
    detail: str
    at: float  # seconds after the process answered
    in_flight: str
    store: str
    upstream: str
    cases: list[str]

    def line(self) -> str:
        return (f"kill {self.iteration:2d} [{self.trigger}: {self.detail}] at {self.at:.2f}s; "
                f"in flight: {self.in_flight}; store: {self.store}; upstream: {self.upstream} "
                f"=> {', '.join(self.cases)}")


class KillLoop:
    def __init__(self, tmp_path: Path, upstream: ScriptedUpstream) -> None:
        self.tmp = tmp_path
        self.data = tmp_path / "data"
        self.upstream = upstream
        self.rng = random.Random(SEED)
        self.model = Model()
        self.next_doc = 0
        self.fresh_targets = 0
        self.stored_at: dict[str, int] = {}          # chunk id -> request index by which its extraction was stored
        self.lifetimes: list[tuple[int, int]] = []   # request index ranges of each process's life
        # the local ports of the last killed process's connections: what it sent just before dying may
        # reach the upstream's log only after the kill, inside the next life's range (late_ports then)
        self.dead_ports: set[int] = set()
        self.late_ports: set[int] = set()
        self.kills: list[KillPoint] = []

    # --- one iteration ---

    def plan(self, gateway: Gateway, iteration: int) -> list[Op]:
        rng = self.rng
        ops = []
        for _ in range(rng.randint(1, 3)):
            name, text = document(self.next_doc)
            self.next_doc += 1
            ops.append(Op("upload", {"name": name, "text": text, "id": document_id(name, text)}))
        if self.model.texts and rng.random() < 0.6:  # a text uploaded before: a no-op if it is still there
            doc = rng.choice(sorted(self.model.texts))
            name = f"copy-of-{doc[4:12]}.md"
            ops.append(Op("upload", {"name": name, "text": self.model.texts[doc], "duplicate": True,
                                     "id": document_id(name, self.model.texts[doc])}))
        processed = sorted(d["id"] for d in gateway.documents("processed") if d["id"] in self.model.live)
        if processed and rng.random() < 0.5:
            doc = rng.choice(processed)
            ops.append(Op("delete", {"id": doc, "name": self.model.live[doc]}))
        existing = [e["name"] for n in dict.fromkeys(self.model.resolve(n) for n in NAMES)
                    if (e := gateway.entity(n)) is not None]
        if len(existing) >= 2 and rng.random() < 0.6:
            a, b = rng.sample(existing, 2)
            if rng.random() < 0.25:
                self.fresh_targets += 1
                target = f"Union {self.fresh_targets}"
            else:
                target = b
            ops.append(Op("merge", {"entities": [a, b], "target": target}))
        if existing and rng.random() < 0.4:
            ops.append(Op("edit", {"entity": rng.choice(existing), "type": f"Role{iteration}"}))
        rng.shuffle(ops)
        return ops

    def wait_for_trigger(self, runner: Runner, trigger: str, start: int) -> str:
        rng = self.rng
        began = time.monotonic()
        if trigger == "timer":
            delay = rng.uniform(0.05, 2.0)
            time.sleep(delay)
            return f"{delay:.2f}s"
        jitter = rng.uniform(0, 0.05)
        if trigger == "extract":
            uploads = sum(1 for op in runner.ops if op.kind == "upload" and not op.args.get("duplicate"))
            k = rng.randint(1, 3 * uploads + 1)
            condition = lambda: len(self.upstream.extractions(start)) >= k  # noqa: E731
            detail = f"{k} extraction calls"
        elif trigger == "doc-merge":
            condition = lambda: self.upstream.count("/api/embed", start) >= 1  # noqa: E731
            detail = "first merge embedding"
        else:
            op = rng.choice(runner.ops)
            condition = lambda: op.sent_at is not None  # noqa: E731
            detail = f"{op.kind} sent"
        while not condition():
            idle = runner.finished_at is not None and time.monotonic() - runner.finished_at > IDLE_FALLBACK
            if idle or time.monotonic() - began > 30:
                return f"{detail} never came: idle"
            time.sleep(0.002)
        time.sleep(jitter)
        return f"{detail} +{jitter * 1000:.0f}ms"

    def iteration(self, i: int) -> None:
        gateway = Gateway(self.data, self.upstream.url, log_path=self.tmp / "logs" / f"run{i:02d}.log").start()
        try:
            self.check_restart(gateway)
            ops = self.plan(gateway, i)
            start, summaries = self.upstream.mark, self.upstream.facts.calls.count("summary")
            runner = Runner(gateway.url, ops, random.Random(self.rng.random()))
            trigger = self.rng.choice(TRIGGERS)
            began = time.monotonic()
            runner.start()
            detail = self.wait_for_trigger(runner, trigger, start)
            in_flight = runner.current
            runner.stop.set()
            at = time.monotonic() - began
            gateway.kill()
        finally:
            gateway.kill()
        runner.join(35)
        assert not runner.is_alive()
        end = self.upstream.mark
        self.lifetimes.append((self.lifetimes[-1][1] if self.lifetimes else 0, end))
        self.late_ports, self.dead_ports = self.dead_ports, gateway.ports_at_death
        checked = time.monotonic()
        copy = snapshot(self.data, self.tmp / "snapshot")
        check_store(copy)
        state = read_state(copy)
        for op in ops:
            if op.outcome in ("acknowledged", "in doubt"):
                self.model.apply(op, state)
        self.check_state(state, f"after kill {i}")
        self.check_extractions(state, end)
        summaries = self.upstream.facts.calls.count("summary") - summaries
        self.kills.append(self.describe(i, trigger, detail, at, in_flight, ops, state, start, summaries))
        print(self.kills[-1].line(), flush=True)
        print(f"   timing: ready {gateway.ready_seconds:.1f}s, ops {at:.1f}s, checks {time.monotonic() - checked:.1f}s",
              flush=True)

    def describe(self, i: int, trigger: str, detail: str, at: float, in_flight: Op | None, ops: list[Op],
                 state: StoreState, start: int, summaries: int) -> KillPoint:
        cases = []
        if in_flight is not None and in_flight.outcome == "in doubt":
            cases.append(f"inside a {in_flight.kind} request")
            flight = f"{in_flight.describe()} ({'took effect' if in_flight in self.model.log else 'no effect'})"
        else:
            flight = "no request"
        statuses = state.status_counts()
        working = [d for d in state.documents.values() if d["status"] == "processing"]
        if any(d["done"] < d["total"] for d in working):
            cases.append("during extraction")
        if any(d["done"] == d["total"] for d in working):
            cases.append("between extraction and the document merge")
        if statuses.get("pending"):
            cases.append("with documents queued")
        if not cases:
            cases.append("idle")
        progress = ", ".join(f"{d['done']}/{d['total']}" for d in working)
        store = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) + (f" ({progress} extracted)"
                                                                             if progress else "")
        calls = Counter(r.path for r in self.upstream.fake.requests[start:])
        late = sum(1 for r in self.upstream.fake.requests[start:] if client_port(r) in self.late_ports)
        upstream = (f"{len(self.upstream.extractions(start, not_from=self.late_ports))} extractions, "
                    f"{calls['/api/embed']} embeds, {summaries} summaries since the restart"
                    + (f" (and {late} requests the previous process sent before its kill)" if late else ""))
        sent = [f"{op.describe()}: {op.outcome}" for op in ops if op.outcome != "not sent"]
        flight += f"; ops: {'; '.join(sent) or 'none'}"
        return KillPoint(i, trigger, detail, at, flight, store or "empty", upstream, cases)

    # --- checks ---

    def check_restart(self, gateway: Gateway) -> None:
        """Right after a restart: the live process's engines agree, and it lists exactly the documents
        that should exist."""
        gateway.check_live_stats()
        listed = {d["id"]: d for d in gateway.documents()}
        assert set(listed) == set(self.model.live), "documents after restart differ from the acknowledged ones"
        assert not [d for d in listed.values() if d["status"] == "failed"], listed

    def check_state(self, state: StoreState, when: str) -> None:
        model = self.model
        assert not state.duplicate_document_ids, when
        assert set(state.documents) == set(model.live), (
            f"{when}: missing {set(model.live) - set(state.documents)}, "
            f"unexpected {set(state.documents) - set(model.live)}")
        for doc, row in state.documents.items():
            assert row["status"] != "failed", f"{when}: {row}"
            if row["status"] == "processed":
                assert row["done"] == row["total"] == len(state.links.get(doc, [])), f"{when}: {row}"
                assert set(state.links[doc]) <= state.chunks & state.extracted, when
        assert state.aliases == model.aliases, f"{when}: aliases {state.aliases} != {model.aliases}"
        assert not set(state.entities) & set(state.aliases), f"{when}: a merged-away name came back"
        for key, kind in model.types.items():
            assert (state.entity_edits.get(key) or {}).get("type") == kind, f"{when}: the edit of {key} was lost"
            if key in state.entities:
                assert state.entities[key]["type"] == kind, f"{when}: {key} is not of its edited type"

    def check_extractions(self, state: StoreState, end: int) -> None:
        """No chunk twice in one process's life; none after its extraction was stored. A request the
        previous process sent just before its kill belongs to that life, wherever the log put it."""
        start = self.lifetimes[-1][0]
        extractions = self.upstream.extractions(start, end, not_from=self.late_ports)
        twice = {c: n for c, n in Counter(c for _, c in extractions).items() if n > 1}
        # when, and on which connection, each came: a client's resend tells apart from two runs
        seen = [(round(r.at - self.upstream.fake.requests[start].at, 3), r.client)
                for i, c in extractions if c in twice for r in [self.upstream.fake.requests[i]]] if twice else []
        assert not twice, f"chunks extracted more than once by one process: {twice}; (seconds in, connection): {seen}"
        again = [(i, c) for i, c in extractions if c in self.stored_at and i >= self.stored_at[c]]
        assert not again, f"chunks extracted again after their extraction was stored: {again}"
        for chunk in state.extracted:
            self.stored_at.setdefault(chunk, end)

    # --- the end ---

    def finish(self) -> tuple[StoreState, float]:
        gateway = Gateway(self.data, self.upstream.url, log_path=self.tmp / "logs" / "final.log").start()
        try:
            self.check_restart(gateway)
            gateway.wait_processed(set(self.model.live))
            gateway.check_live_stats()
            code, seconds = gateway.terminate()
        finally:
            gateway.kill()
        assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
        end = self.upstream.mark
        self.lifetimes.append((self.lifetimes[-1][1] if self.lifetimes else 0, end))
        self.late_ports, self.dead_ports = self.dead_ports, set()
        check_store(self.data)
        state = read_state(self.data)
        self.check_state(state, "at the end")
        assert all(d["status"] == "processed" for d in state.documents.values())
        self.check_extractions(state, end)
        return state, seconds


def replay(ops: list[Op], tmp_path: Path) -> StoreState:
    """The same operations, in the same order, on a fresh store, never killed: each curation
    request waits until the documents before it are processed."""
    clean = ScriptedUpstream(reply_delay=0)
    with clean.serve():
        gateway = Gateway(tmp_path / "clean", clean.url, log_path=tmp_path / "logs" / "clean.log").start()
        with gateway, httpx.Client(base_url=gateway.url, timeout=30) as client:
            def settled() -> bool:
                documents = gateway.documents()
                assert not [d for d in documents if d["status"] == "failed"], documents
                return all(d["status"] == "processed" for d in documents)
            for op in ops:
                if op.kind != "upload":
                    wait_until(settled, 60, "the clean run's documents")
                response = op.send(client)
                assert response.is_success, (op.describe(), response.text)
            wait_until(settled, 60, "the clean run's documents")
            code, _ = gateway.terminate()
            assert code in GRACEFUL_EXIT_CODES
    return read_state(tmp_path / "clean")


@pytest.mark.slow
def test_sigkill_loop_keeps_every_invariant(tmp_path: Path) -> None:
    started = time.monotonic()
    upstream = ScriptedUpstream(reply_delay=0.08)
    with upstream.serve():
        loop = KillLoop(tmp_path, upstream)
        for i in range(1, KILL_POINTS + 1):
            loop.iteration(i)
        final, stop_seconds = loop.finish()   # a graceful exit (its seconds are in the summary, not bounded)

    entities, relations = loop.model.expected_graph()
    assert set(final.entities) == entities
    assert set(final.relations) == relations

    clean = replay(loop.model.log, tmp_path)
    assert {k: (e["type"], sorted(e["sources"])) for k, e in final.entities.items()} == {
        k: (e["type"], sorted(e["sources"])) for k, e in clean.entities.items()}
    assert final.relations == clean.relations  # weights too: nothing was merged twice
    assert final.aliases == clean.aliases

    cases = Counter(c for k in loop.kills for c in k.cases)
    triggers = Counter(k.trigger for k in loop.kills)
    summary = {"kill_points": len(loop.kills), "seed": SEED, "seconds": round(time.monotonic() - started, 1),
               "triggers": dict(triggers), "cases": dict(cases),
               "operations_that_took_effect": dict(Counter(op.kind for op in loop.model.log)),
               "documents": len(final.documents), "entities": len(final.entities),
               "relations": len(final.relations), "aliases": len(final.aliases),
               "extraction_calls": len(upstream.extractions()), "chunks_extracted": len(final.extracted),
               "sigterm_exit_seconds": round(stop_seconds, 2)}
    print("kill loop summary: " + json.dumps(summary), flush=True)
    (tmp_path / "kill-loop.json").write_text(json.dumps({**summary, "kills": [k.line() for k in loop.kills]},
                                                        indent=1))
    assert len(loop.kills) == KILL_POINTS


class HoldEmbeddings:
    """ASGI wrapper for the fake upstream: /api/embed waits while ``release`` is unset."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.release = anyio.Event()
        self.held = anyio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/embed" and not self.release.is_set():
            self.held.set()
            await self.release.wait()
        await self.app(scope, receive, send)


@pytest.mark.anyio
async def test_an_entity_edit_racing_a_document_merge_keeps_the_new_sources(settings: Settings,
                                                                            fake: FakeOllama) -> None:
    """Found by the kill loop (the final graph differed from the clean run's): an edit read the
    entity's sources before taking the merge lock, so a document merged in between lost its chunk
    from the entity when the edit rebuilt it."""
    from tests.conftest import gateway_client
    from tests.extractor import KnownFacts
    from tests.rag_helpers import settle, upload

    fake.structured = KnownFacts({"Echo": "Person", "Papa": "Person"})
    gate = HoldEmbeddings(fake.app)
    gate.release.set()
    fake.app = gate  # type: ignore[assignment]
    async with gateway_client(settings, fake) as client:
        first = await upload(client, "a.md", "Echo met Papa in Berlin.")
        assert (await settle(client, first["id"]))["status"] == "processed"
        gate.release, gate.held = anyio.Event(), anyio.Event()
        second = await upload(client, "b.md", "Echo worked alone in Paris.")
        with anyio.fail_after(10):
            await gate.held.wait()  # the second document's merge holds the merge lock
        async with anyio.create_task_group() as group:
            async def edit() -> None:
                response = await client.patch("/rag/entities/echo", json={"type": "Agent"})
                assert response.status_code == 200, response.text
            group.start_soon(edit)  # reads the entity, then waits for the merge lock
            await anyio.sleep(0.3)
            gate.release.set()
        assert (await settle(client, second["id"]))["status"] == "processed"
        echo = (await client.get("/rag/entities/echo")).json()
        assert echo["type"] == "Agent"
        assert len(echo["sources"]) == 2, echo
    await anyio.to_thread.run_sync(check_store, settings.data_dir)
