"""How soon GraphGate reacts, in seconds: the figures the test suite used to bound and now leaves to
this script (a loaded machine stretches them; the tests check the mechanism: what was cut, left,
stored or never waited for).

1. a client leaving a streamed chat: until the upstream's stream is closed (tests/test_live_streaming.py,
   checklist 37; tests/test_quiet_logs.py), with the upstream sending a line every 0.5 s and with it
   silent for 30 s;
2. a shutdown while the watcher's check of a hung upstream is out: until the lifespan has ended
   (tests/test_health.py);
3. SIGTERM to a real ``graphgate serve`` process: until it exits, with extraction in flight and with a
   streaming chat open (GRAPHGATE_SHUTDOWN_GRACE, 5 s, is what that one waits) (tests/test_sigterm.py,
   tests/test_kill_loop.py).

GraphGate and the fake Ollama run on 127.0.0.1 (uvicorn in threads for 1 and 2, a real process for 3).

    python bench/reaction_times.py [--rounds 3]

Measured on the 2-core development machine, quiet (median of 3): the upstream stream closed 0.02 s
after a client left (0.01 s when silent), a shutdown with a hung check 0.05 s, SIGTERM to exit
1.3 s with extraction in flight and 5.6 s with a chat streaming (the 5 s grace). The suite used to
bound these at 2 s, 2 s and 10 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.app import create_app  # noqa: E402
from proxy.core.settings import Settings  # noqa: E402
from tests.conftest import running  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402
from tests.live import serve_in_thread  # noqa: E402
from tests.reliability_harness import Gateway, ScriptedUpstream  # noqa: E402

CHAT = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "hello"}]}


def settings_in(directory: str, **overrides: object) -> Settings:
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": "http://127.0.0.1:11434",
                                  "GRAPHGATE_DATA_DIR": directory}).replace(**overrides)


def wait(condition: Callable[[], object], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("gave up waiting")
        time.sleep(0.002)


def client_leaves(chunk_delay: float) -> float:
    """Seconds from a client closing a streamed chat after two lines to the upstream's stream ending."""
    fake = FakeOllama(chunk_delay=chunk_delay, reply=[f"w{i} " for i in range(200)])
    with fake.serve() as upstream, tempfile.TemporaryDirectory() as data, \
            serve_in_thread(create_app(settings_in(data, upstream=upstream))) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        with client.stream("POST", "/api/chat", json=CHAT) as response:
            lines = response.iter_lines()
            next(lines)
            if chunk_delay < 10:
                next(lines)
        left = time.monotonic()
        wait(lambda: fake.stream_events and fake.stream_events[-1].ended is not None)
        ended = fake.stream_events[-1].ended
        assert ended is not None
        return ended - left


def shutdown_with_a_hung_check() -> float:
    """Seconds a lifespan's shutdown takes while the watcher's check of the upstream hangs."""
    fake = FakeOllama()
    fake.hang_paths.add("/api/version")

    async def run(upstream: str, data: str) -> float:
        app = create_app(settings_in(data, upstream=upstream, discovery_timeout=120.0), watch_seconds=0.05)
        async with running(app):
            while not fake.hangs:   # noqa: ASYNC110 - the fake serves in another thread: no event to wait on
                await anyio.sleep(0.005)
            began = time.monotonic()
        return time.monotonic() - began

    with fake.serve() as upstream, tempfile.TemporaryDirectory() as data:
        return anyio.run(run, upstream, data)


def sigterm_exit(streaming: bool) -> float:
    """Seconds from SIGTERM to the exit of a real process: extraction in flight, or a chat streaming."""
    upstream = ScriptedUpstream(reply_delay=0.25)
    with upstream.serve(), tempfile.TemporaryDirectory() as root:
        gateway = Gateway(Path(root) / "data", upstream.url, log_path=Path(root) / "gateway.log").start()
        with gateway:
            if streaming:
                upstream.fake.chunk_delay = 0.5
                upstream.fake.reply = [f"word{i} " for i in range(600)]
                received: list[str] = []

                def chat() -> None:
                    try:
                        with httpx.stream("POST", gateway.url + "/api/chat", json=CHAT, timeout=60) as response:
                            received.extend(response.iter_lines())
                    except httpx.HTTPError:
                        pass

                threading.Thread(target=chat, daemon=True).start()
                wait(lambda: len(received) >= 2)
            else:
                gateway.upload(*range(4))
                wait(lambda: len(upstream.extractions()) >= 5)
            _, seconds = gateway.terminate()
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    measures: dict[str, Callable[[], float]] = {
        "client left a stream: upstream closed after": lambda: client_leaves(0.5),
        "client left a silent stream: upstream closed after": lambda: client_leaves(30.0),
        "shutdown with a hung upstream check": shutdown_with_a_hung_check,
        "SIGTERM to exit, extraction in flight": lambda: sigterm_exit(streaming=False),
        "SIGTERM to exit, a chat streaming": lambda: sigterm_exit(streaming=True),
    }
    print(f"seconds, {args.rounds} rounds each: median (min-max)")
    for name, measure in measures.items():
        values = [measure() for _ in range(args.rounds)]
        print(f"{name:<52} {statistics.median(values):7.3f}  ({min(values):.3f}-{max(values):.3f})", flush=True)


if __name__ == "__main__":
    main()
