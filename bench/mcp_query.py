"""What the MCP query tool costs over the same /rag/query.

Starts the fake Ollama (answering extraction like a perfect model on the test corpus) and GraphGate
in front of it as two real uvicorn processes on 127.0.0.1, ingests the corpus, then asks the same
question N times (default 200) through /rag/query (one keep-alive connection) and through the MCP
query tool (one client session of the SDK over Streamable HTTP, both for a 2026-07-28 client and
for one of the initialize handshake), the calls interleaved so that both see the same machine.

    python bench/mcp_query.py [--calls 200]

Target: the MCP query's p50 at most 5 ms over /rag/query's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy_overhead import free_port  # noqa: E402 - after the path is set
from tests.corpus import CITY, CLUB, TEAM  # noqa: E402

FAKE_SERVER = """
import sys, uvicorn
from tests.corpus import PEOPLE
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
fake = FakeOllama()
fake.structured = KnownFacts(PEOPLE)
fake.requests = type("Discard", (list,), {"append": lambda self, item: None})()  # keep memory flat
uvicorn.run(fake.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""
QUESTION = "Who leads the Orion project, and where is Acme Corp based?"


def wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def start(data_dir: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    fake_port, gateway_port = free_port(), free_port()
    fake = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, str(fake_port)], env=env, cwd=ROOT)
    wait_ready(f"http://127.0.0.1:{fake_port}/")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve"], cwd=ROOT,
        env={**env, "GRAPHGATE_UPSTREAM": f"http://127.0.0.1:{fake_port}", "GRAPHGATE_PORT": str(gateway_port),
             "GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_LOG_LEVEL": "warning",
             "GRAPHGATE_KEYWORD_BUDGET": "30"})
    url = f"http://127.0.0.1:{gateway_port}"
    wait_ready(url + "/rag/health")
    return [gateway, fake], url


def ingest(url: str) -> None:
    ids = [httpx.post(f"{url}/rag/documents", json={"name": name, "text": text}).json()["documents"][0]["id"]
           for name, text in (("team.md", TEAM), ("city.md", CITY), ("club.md", CLUB))]
    deadline = time.monotonic() + 60
    while any(httpx.get(f"{url}/rag/documents/{i}").json()["status"] != "processed" for i in ids):
        if time.monotonic() > deadline:
            raise RuntimeError("the corpus was not processed")
        time.sleep(0.1)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def measure(url: str, calls: int, mode: str) -> tuple[list[float], list[float], str]:
    body = {"query": QUESTION}
    rag_times: list[float] = []
    mcp_times: list[float] = []
    async with (httpx.AsyncClient(base_url=url, timeout=30) as http,
                httpx2.AsyncClient(timeout=httpx2.Timeout(30), trust_env=False) as http2,
                Client(streamable_http_client(url + "/mcp", http_client=http2), mode=mode) as client):

        async def rag() -> str:
            response = await http.post("/rag/query", json=body)
            response.raise_for_status()
            return str(response.json()["context"])

        async def mcp() -> str:
            result = await client.call_tool("query", {"question": QUESTION})
            assert not result.is_error and isinstance(result.structured_content, dict), result
            return str(result.structured_content["context"])

        context = await rag()
        if await mcp() != context:
            raise RuntimeError("the MCP query's context differs from /rag/query's")
        for _ in range(20):  # warm both paths (connections, caches, the tool's validators)
            await rag()
            await mcp()
        for _ in range(calls):
            rag_times.append(await timed(rag))
            mcp_times.append(await timed(mcp))
    return rag_times, mcp_times, context


def report(label: str, rag_times: list[float], mcp_times: list[float]) -> None:
    rag_p50, mcp_p50 = statistics.median(rag_times), statistics.median(mcp_times)
    rag_p95 = statistics.quantiles(rag_times, n=20)[18]
    mcp_p95 = statistics.quantiles(mcp_times, n=20)[18]
    print(f"{label:<26} /rag/query p50 {rag_p50:6.2f} ms (p95 {rag_p95:6.2f})   MCP query p50 {mcp_p50:6.2f} ms "
          f"(p95 {mcp_p95:6.2f})   added p50 {mcp_p50 - rag_p50:+6.2f} ms  [target <= 5 ms]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="graphgate-bench-mcp-") as tmp:
        processes, url = start(Path(tmp) / "data")
        try:
            ingest(url)
            for mode, label in (("auto", "2026-07-28 client"), ("legacy", "initialize-handshake client")):
                rag_times, mcp_times, context = anyio.run(measure, url, args.calls, mode)
                report(label, rag_times, mcp_times)
            print(f"({args.calls} calls each, interleaved; the context: {len(context)} characters)")
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
