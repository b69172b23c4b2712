"""What GraphGate adds on top of talking to Ollama directly.

Starts the fake Ollama (zero delay) and GraphGate in front of it as two real uvicorn processes on
127.0.0.1, then measures, direct and through GraphGate, in one run:

  1. p50/p95 latency of N sequential non-streaming /api/chat calls (default 500);
  2. time to first line of sequential streamed chats;
  3. aggregate NDJSON lines/s for 50 concurrent streams of 500 lines each.

    python bench/proxy_overhead.py [--calls 500] [--streams 50] [--lines 500]

Targets (2 cores): added p50 <= 2 ms, added time to first line <= 2 ms p50, relay throughput >= 60 %
of direct.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

FAKE_SERVER = """
import sys, uvicorn
from tests.fake_ollama import FakeOllama
fake = FakeOllama(reply=[f"w{i} " for i in range(int(sys.argv[2]))])
fake.requests = type("Discard", (list,), {"append": lambda self, item: None})()  # keep memory flat
uvicorn.run(fake.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def start_servers(lines: int) -> tuple[list[subprocess.Popen], str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    fake_port, gate_port = free_port(), free_port()
    fake = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, str(fake_port), str(lines)], env=env, cwd=ROOT)
    direct = f"http://127.0.0.1:{fake_port}"
    gate_env = {**env, "GRAPHGATE_UPSTREAM": direct, "GRAPHGATE_PORT": str(gate_port),
                "GRAPHGATE_LOG_LEVEL": "warning",
                # an empty store of its own: the chats are not grounded, only relayed
                "GRAPHGATE_DATA_DIR": tempfile.mkdtemp(prefix="graphgate-bench-overhead-")}
    gate = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=gate_env, cwd=ROOT)
    gateway = f"http://127.0.0.1:{gate_port}"
    wait_ready(direct)
    wait_ready(gateway)
    return [fake, gate], direct, gateway


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def sequential_latency(base: str, calls: int) -> list[float]:
    body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    timings = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(20):  # warm-up
            client.post("/api/chat", json=body)
        for _ in range(calls):
            start = time.perf_counter()
            response = client.post("/api/chat", json=body)
            timings.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200
    return timings


def first_line_latency(base: str, calls: int) -> list[float]:
    body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    timings = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(calls + 10):
            start = time.perf_counter()
            first = None
            with client.stream("POST", "/api/chat", json=body) as response:
                for _line in response.iter_lines():  # read to the end: a cut stream leaves work behind
                    first = first or time.perf_counter()
            if first is None:
                raise RuntimeError("the chat stream sent no line")
            if i >= 10:
                timings.append((first - start) * 1000)
    return timings


async def concurrent_throughput(base: str, streams: int) -> tuple[int, float]:
    body = {"model": "llama3.2:latest", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    limits = httpx.Limits(max_connections=streams + 5)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        async def one() -> int:
            count = 0
            async with client.stream("POST", "/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    if line:
                        count += 1
            return count

        await one()  # warm-up
        start = time.perf_counter()
        counts = await asyncio.gather(*(one() for _ in range(streams)))
        return sum(counts), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--first-line-calls", type=int, default=200)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--lines", type=int, default=500)
    args = parser.parse_args()
    processes, direct, gateway = start_servers(args.lines)
    try:
        rows = []
        lat = {name: sequential_latency(url, args.calls) for name, url in (("direct", direct), ("graphgate", gateway))}
        ttfl = {name: first_line_latency(url, args.first_line_calls)
                for name, url in (("direct", direct), ("graphgate", gateway))}
        thr = {name: asyncio.run(concurrent_throughput(url, args.streams))
               for name, url in (("direct", direct), ("graphgate", gateway))}
        for name in ("direct", "graphgate"):
            lines, seconds = thr[name]
            rows.append((name, statistics.median(lat[name]), percentile(lat[name], 95),
                         statistics.median(ttfl[name]), percentile(ttfl[name], 95), lines / seconds, lines))
        print(f"{'path':<10} {'chat p50':>9} {'chat p95':>9} {'1st p50':>8} {'1st p95':>8} "
              f"{'lines/s':>10} {'lines':>7}")
        for name, p50, p95, f50, f95, rate, lines in rows:
            print(f"{name:<10} {p50:8.2f}ms {p95:8.2f}ms {f50:7.2f}ms {f95:7.2f}ms {rate:10.0f} {lines:7d}")
        d, g = rows
        print(f"\nadded latency p50: {g[1] - d[1]:.2f} ms (target <= 2 ms), p95: {g[2] - d[2]:.2f} ms")
        print(f"added time to first line p50: {g[3] - d[3]:.2f} ms (target <= 2 ms)")
        print(f"relay throughput: {100 * g[5] / d[5]:.0f}% of direct (target >= 60%)")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)


if __name__ == "__main__":
    main()
