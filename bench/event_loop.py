"""How long the gateway takes to answer while a merge commit is held open (the timing half of
``tests/test_event_loop.py``, which checks only that the answers come while the commit is held).

GraphGate and the fake upstream run on real uvicorn servers on 127.0.0.1, in this process; one document
is ingested, a chat streams a line every ``--chunk-delay`` seconds, and a merge's commit is held in the
store's worker thread for ``--hold`` seconds in its database transaction, then as long in its
vector-index inserts. Meanwhile ``GET /`` and an entity page are asked in turn; printed per phase:
their p50 / p95 / max, and the same for how late each streamed line came beyond ``--chunk-delay``.

    python bench/event_loop.py [--hold 1.2] [--chunk-delay 0.05] [--rounds 3]

Measured on the 2-core development machine with the test suite running beside it (one round):
GET / p50 2.5 ms / max 117 ms, the entity page p50 12-18 ms / max 287 ms, a streamed line late by
p50 1 ms / max 64 ms. The maxima are what a loaded machine's scheduler gives (the test used to bound
them at 50 ms and failed on a busy machine at 592 ms), which is why the test checks the order of
events instead: each answer came while the commit was still held.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admin.rendering import ref  # noqa: E402
from proxy.app import create_app  # noqa: E402
from proxy.core.settings import Settings  # noqa: E402
from tests.corpus import PEOPLE, TEAM  # noqa: E402
from tests.extractor import KnownFacts  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402
from tests.held_commit import PHASES, HeldCommit  # noqa: E402
from tests.live import serve_in_thread  # noqa: E402

PAGES = (("GET /", "/"), ("entity page", f"/admin/entities/{ref('bob jones')}"))


def processed(client: httpx.Client, name: str, text: str) -> None:
    document = client.post("/rag/documents", json={"name": name, "text": text}).json()["documents"][0]
    while client.get(f"/rag/documents/{document['id']}").json()["status"] != "processed":
        time.sleep(0.02)


def one_round(hold: float, chunk_delay: float) -> dict[str, dict[str, list[float]]]:
    """Per phase: each page's answer times, and the stream's gaps between lines (seconds)."""
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    data = tempfile.mkdtemp(prefix="graphgate-bench-loop-")
    settings = Settings.load(environ={"GRAPHGATE_UPSTREAM": "http://127.0.0.1:11434", "GRAPHGATE_DATA_DIR": data})
    with pytest.MonkeyPatch.context() as patch, fake.serve() as upstream, \
            serve_in_thread(create_app(settings.replace(upstream=upstream))) as gateway, \
            httpx.Client(base_url=gateway, timeout=60) as client:
        processed(client, "team.md", TEAM)
        held = HeldCommit(patch, hold_seconds=hold)
        fake.chunk_delay = chunk_delay
        fake.reply = [f"w{i} " for i in range(int(4 * hold / chunk_delay) + 100)]
        arrivals: list[float] = []
        done = threading.Event()

        def stream() -> None:
            body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "/bypass hello"}]}
            with httpx.Client(base_url=gateway, timeout=60) as streamer, \
                    streamer.stream("POST", "/api/chat", json=body) as response:
                for line in response.iter_lines():
                    if done.is_set():
                        return
                    if line:
                        json.loads(line)
                        arrivals.append(time.monotonic())

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        while not arrivals:
            time.sleep(0.01)
        held.armed = True
        merger = threading.Thread(target=lambda: httpx.post(
            f"{gateway}/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"}, timeout=60), daemon=True)
        merger.start()
        figures: dict[str, dict[str, list[float]]] = {}
        for phase in PHASES:
            held.entered[phase].wait(60)
            start = time.monotonic()
            pages: dict[str, list[float]] = {name: [] for name, _ in PAGES}
            while held.phase == phase and time.monotonic() - start < hold - 0.3:
                for name, path in PAGES:
                    sent = time.monotonic()
                    client.get(path).raise_for_status()
                    pages[name].append(time.monotonic() - sent)
                time.sleep(0.02)
            during = [t for t in arrivals if start <= t <= time.monotonic()]
            gaps = [b - a - chunk_delay for a, b in zip(during, during[1:], strict=False)]
            figures[phase] = {**pages, "stream line late by": gaps}
        merger.join(60)
        done.set()
        streamer.join(60)
    return figures


def ms(values: list[float], p: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=float, default=1.2, help="seconds each phase of the commit is held")
    parser.add_argument("--chunk-delay", type=float, default=0.05, help="seconds between the stream's lines")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    merged: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for phase, figures in one_round(args.hold, args.chunk_delay).items():
            for name, values in figures.items():
                merged.setdefault(phase, {}).setdefault(name, []).extend(values)
    print(f"merge commit held {args.hold} s per phase, {args.rounds} rounds; times in ms")
    print(f"{'phase':<16}{'answer':<22}{'n':>5}{'p50':>9}{'p95':>9}{'max':>9}")
    for phase, figures in merged.items():
        for name, values in figures.items():
            if values:
                print(f"{phase:<16}{name:<22}{len(values):>5}{ms(values, 50):>9}{ms(values, 95):>9}"
                      f"{1000 * max(values):>9.1f}")
        if not figures["stream line late by"]:
            print(f"{phase:<16}{'stream line late by':<22}    0  (no line arrived during the phase)")


if __name__ == "__main__":
    main()
