"""Nothing blocks the event loop: while a merge commit is held open, in its database transaction
and then in its vector-index inserts, the gateway keeps answering (GraphGate and the fake upstream
on real uvicorn servers; the commit is held inside the store's own worker thread).

The test holds each phase until it has its answers and then releases it: a page answered, an entity
looked up and a streamed line relayed while the phase was still held prove the handlers ran meanwhile,
however slow the machine. A blocked loop answers only once the hold gives up (HANG_GUARD), after the
phase, and fails the test. How long those answers take is measured by ``bench/event_loop.py``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from admin.rendering import ref
from proxy.app import create_app
from proxy.core.settings import Settings
from proxy.core.tokens import get_tokenizer
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, StreamEvent
from tests.held_commit import PHASES, HeldCommit
from tests.live import serve_in_thread

HANG_GUARD = 30.0   # seconds a phase is held at most: only a gateway that cannot answer waits this long


@pytest.fixture
def gateway(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> Iterator[str]:
    with fake.serve() as upstream, serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        yield url


def _processed(client: httpx.Client, name: str, text: str) -> None:
    document = client.post("/rag/documents", json={"name": name, "text": text}).json()["documents"][0]
    deadline = time.monotonic() + 60
    while client.get(f"/rag/documents/{document['id']}").json()["status"] != "processed":
        assert time.monotonic() < deadline, "the document was not processed"
        time.sleep(0.02)


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_held_merge_commit_stalls_no_page_no_stream_and_no_entity_lookup(
        gateway: str, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    with httpx.Client(base_url=gateway, timeout=2 * HANG_GUARD) as client:
        _processed(client, "team.md", TEAM)
        upstream_stream: list[StreamEvent] = []
        held = HeldCommit(monkeypatch, hold_seconds=HANG_GUARD,
                          upstream_lines=lambda: upstream_stream[0].sent)

        # a chat streaming a line every 20 ms, started before the commit and left when the test is done
        fake.chunk_delay = 0.02
        fake.reply = [f"w{i} " for i in range(20_000)]
        received: list[int] = []   # the number in each streamed line, in order of arrival
        done = threading.Event()

        def stream() -> None:
            body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "/bypass hello"}]}
            with httpx.Client(base_url=gateway, timeout=2 * HANG_GUARD) as streamer:
                with streamer.stream("POST", "/api/chat", json=body) as response:
                    for line in response.iter_lines():
                        if done.is_set():
                            return
                        content = json.loads(line)["message"]["content"] if line else ""
                        if content.startswith("w"):
                            received.append(int(content[1:]))

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        _wait(lambda: received, "the chat never streamed")
        upstream_stream.append(fake.stream_events[-1])
        assert upstream_stream[0].path == "/api/chat"

        merged: list[httpx.Response] = []
        held.armed = True
        merger = threading.Thread(target=lambda: merged.append(httpx.post(
            f"{gateway}/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"}, timeout=4 * HANG_GUARD)),
            daemon=True)
        merger.start()

        answered_while_held: dict[str, list[tuple[str, bool]]] = {phase: [] for phase in PHASES}
        relayed_while_held: dict[str, bool] = {}
        for phase in PHASES:
            assert held.entered[phase].wait(HANG_GUARD), f"the merge commit never reached its {phase}"
            for name, path in (("GET /", "/"), ("entity page", f"/admin/entities/{ref('bob jones')}")):
                response = client.get(path)
                assert response.status_code == 200, response.text
                answered_while_held[phase].append((name, held.phase == phase))
            # a line the upstream had not yet sent when the phase began reaches the client
            first_new = held.lines_before[phase]
            _wait(lambda: (received and received[-1] >= first_new) or held.phase != phase,  # noqa: B023
                  f"no streamed line arrived during the {phase}")
            relayed_while_held[phase] = held.phase == phase
            held.release[phase].set()

        merger.join(timeout=4 * HANG_GUARD)
        assert merged and merged[0].status_code == 200, merged and merged[0].text
        assert held.phases_seen == list(PHASES)
        done.set()
        streamer.join(timeout=2 * HANG_GUARD)

    for phase in PHASES:
        assert held.released_early[phase], f"nothing was answered within {HANG_GUARD:.0f} s of the commit's {phase}"
        assert answered_while_held[phase] == [("GET /", True), ("entity page", True)], (
            f"answered only after the commit's {phase} was released: {answered_while_held[phase]}")
        assert relayed_while_held[phase], f"the stream's lines waited for the commit's {phase}"


def test_a_long_conversation_is_tokenised_off_the_event_loop(
        gateway: str, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn whose conversation holds a pasted document (67 KB: ~8 ms of tokenising) has it counted
    in a worker thread: while that count is held, the gateway answers /api/version. On the loop, the
    answer would come only once the hold gave up (HANG_GUARD), and the test fails."""
    tokenizer = get_tokenizer()
    counting, release = threading.Event(), threading.Event()
    encode = tokenizer.encode
    pasted = "The quarterly report of the Orion project, section after section. " * 1000

    def held(text: str) -> list[int]:
        if len(text) >= len(pasted):
            counting.set()
            release.wait(HANG_GUARD)
        return encode(text)

    monkeypatch.setattr(tokenizer, "encode", held)
    with httpx.Client(base_url=gateway, timeout=2 * HANG_GUARD) as client:
        _processed(client, "team.md", TEAM)
        answers: list[httpx.Response] = []
        body = {"model": "llama3.2:latest", "stream": False, "options": {"num_ctx": 65536},
                "messages": [{"role": "user", "content": pasted}, {"role": "assistant", "content": "Noted."},
                             {"role": "user", "content": "Who leads the Orion project?"}]}
        chat = threading.Thread(target=lambda: answers.append(client.post("/api/chat", json=body)), daemon=True)
        chat.start()
        try:
            assert counting.wait(HANG_GUARD), "the conversation was never counted"
            started = time.monotonic()
            version = client.get("/api/version", timeout=HANG_GUARD)
            assert version.status_code == 200
            assert not release.is_set() and time.monotonic() - started < HANG_GUARD
        finally:
            release.set()
            chat.join(2 * HANG_GUARD)
        assert answers and answers[0].status_code == 200, answers
        # the turn was grounded: the pasted document was counted, and the question's context injected
        chats = [r for r in fake.requests_to("/api/chat") if "Orion project?" in r.body.decode()]
        assert chats and "Alice Smith" in json.dumps(chats[-1].json["messages"])


@pytest.mark.parametrize("stage", ["relation_state", "relation_row"])
def test_a_merges_recompute_runs_off_the_event_loop(
        gateway: str, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """A merge builds a state and a row for every entity and relation it touches (thousands in a
    big one: 100-150 ms at a time on the loop during ingestion). Held in the middle of that work,
    the gateway still answers /api/version; on the loop it could not until the hold gave up."""
    from proxy.merging import recompute

    building, release = threading.Event(), threading.Event()
    original = getattr(recompute, stage)

    def held(*args: Any, **kwargs: Any) -> Any:
        building.set()
        release.wait(HANG_GUARD)
        return original(*args, **kwargs)

    monkeypatch.setattr(recompute, stage, held)
    with httpx.Client(base_url=gateway, timeout=2 * HANG_GUARD) as client:
        document = client.post("/rag/documents", json={"name": "team.md", "text": TEAM}).json()["documents"][0]
        try:
            assert building.wait(HANG_GUARD), f"the merge never reached {stage}"
            started = time.monotonic()
            assert client.get("/api/version", timeout=HANG_GUARD).status_code == 200
            assert not release.is_set() and time.monotonic() - started < HANG_GUARD
        finally:
            release.set()
        _wait(lambda: client.get(f"/rag/documents/{document['id']}").json()["status"] == "processed",
              "the document was not processed once the hold ended")
