"""How long GET /metrics takes on a big store.

Builds a store with N entities (bench/retrieval.py's bulk build: 2N chunks, about 2N relations,
N/25 documents), or reuses one with --store DIR (built there when DIR holds none), then starts the
fake Ollama and GraphGate over that store as two real uvicorn processes on 127.0.0.1, and times
sequential GET /metrics over one keep-alive connection (the time a Prometheus scrape waits).

    python bench/metrics_scrape.py [--entities 100000] [--scrapes 200] [--store DIR]

Target (2 cores): p99 <= 20 ms at 100k entities.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy_overhead import FAKE_SERVER, free_port, percentile, wait_ready  # noqa: E402
from bench.retrieval import build  # noqa: E402


def serve(data: Path) -> tuple[list[subprocess.Popen], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    fake_port, gate_port = free_port(), free_port()
    fake = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, str(fake_port), "5"], env=env, cwd=ROOT)
    gate = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], cwd=ROOT, env={
        **env, "GRAPHGATE_UPSTREAM": f"http://127.0.0.1:{fake_port}", "GRAPHGATE_PORT": str(gate_port),
        "GRAPHGATE_LOG_LEVEL": "warning", "GRAPHGATE_DATA_DIR": str(data)})
    gateway = f"http://127.0.0.1:{gate_port}"
    wait_ready(f"http://127.0.0.1:{fake_port}")
    wait_ready(gateway, timeout=300)   # a big store opens in seconds
    return [fake, gate], gateway


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def wait_idle(process: subprocess.Popen, timeout: float = 300) -> float:
    """Wait until the gateway's start-up work (the name index, built beside serving on a big store)
    is over: under 10 % of a core for a second. The seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = cpu_seconds(process.pid)
        time.sleep(1)
        if cpu_seconds(process.pid) - before < 0.1:
            break
    return time.monotonic() - started


def scrape_times(gateway: str, scrapes: int) -> tuple[list[float], str]:
    timings = []
    with httpx.Client(base_url=gateway, timeout=30) as client:
        for _ in range(10):  # warm-up
            client.get("/metrics").raise_for_status()
        for _ in range(scrapes):
            start = time.perf_counter()
            response = client.get("/metrics")
            timings.append((time.perf_counter() - start) * 1000)
            response.raise_for_status()
    return timings, response.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--store", type=Path, metavar="DIR",
                        help="the store to scrape, kept; built there first when DIR holds none")
    args = parser.parse_args()
    data = args.store or Path(tempfile.mkdtemp(prefix="gg-metrics-"))
    try:
        if not (data / "graphgate.duckdb").exists():
            data.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            build(data, 2 * args.entities)
            print(f"built a store of {args.entities:,} entities in {time.perf_counter() - started:.0f} s", flush=True)
        processes, gateway = serve(data)
        try:
            waited = wait_idle(processes[1])
            timings, text = scrape_times(gateway, args.scrapes)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:   # a big store saves its indexes on the way out
                try:
                    process.wait(180)
                except subprocess.TimeoutExpired:
                    process.kill()
    finally:
        if args.store is None:
            shutil.rmtree(data, ignore_errors=True)
    values = {sample.name: sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples if sample.labels in ({}, {"kb": "default"})}
    print(f"GET /metrics over real uvicorn on 127.0.0.1 (the gateway idle {waited:.0f} s after it answered), "
          f"{args.scrapes} sequential scrapes of a store with "
          f"{values['graphgate_entities']:,.0f} entities, {values['graphgate_relations']:,.0f} relations, "
          f"{values['graphgate_chunks']:,.0f} chunks ({len(text.encode()):,} bytes of text):")
    print(f"p50 {statistics.median(timings):.2f} ms, p99 {percentile(timings, 99):.2f} ms, "
          f"max {max(timings):.2f} ms (target p99 <= 20 ms)")


if __name__ == "__main__":
    main()
