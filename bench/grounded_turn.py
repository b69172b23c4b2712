"""Where a grounded chat turn's time goes (issue 33, item 1): the first token through GraphGate
against the upstream directly, and the retrieval's stages.

The fake Ollama (bench/load.py's, every delay zero) and GraphGate run as real processes on
127.0.0.1; ``--documents`` documents of bench/load.py's corpus are ingested through /rag/documents.
Then ``--questions`` questions of that corpus are asked ``--rounds`` times, interleaved: each as a
streamed /api/chat straight to the upstream, through GraphGate (grounded), and as /rag/query (whose
``timings`` give each stage). Printed: first line p50 / p95 direct and through GraphGate and the
difference, and each stage's p50. With ``--profile FILE`` the gateway is sampled by py-spy (if
installed) during the grounded turns, and FILE gets the collapsed stacks (``py-spy record
--format raw``): the profile kept in docs/performance.md was summarised from such a file.
``--cpu-queries N`` then asks N /rag/query (with the ``--set`` knobs, e.g. ``effort=light``) and
prints the gateway's CPU time a query: a figure a busy machine moves less than latency.

    python bench/grounded_turn.py [--documents 500] [--questions 40] [--rounds 2] [--profile FILE]
                                  [--keep DIR] [--cpu-queries N [--set KNOB=VALUE ...]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import MODEL, FakeConfig, Ingestion, free_port, ingest, make_corpus, question, start_servers
from bench.multihop_recall import parse_knob
from bench.proxy_overhead import cpu_seconds


async def first_line(client: httpx.AsyncClient, base: str, text: str) -> float:
    """Seconds to the first content line of a streamed /api/chat at ``base``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True}
    start = time.perf_counter()
    async with client.stream("POST", f"{base}/api/chat", json=body) as response:
        assert response.status_code == 200, f"HTTP {response.status_code}"
        elapsed = None
        async for line in response.aiter_lines():   # read to the end: the connection is reused
            if elapsed is None and line.strip() and json.loads(line).get("message", {}).get("content"):
                elapsed = time.perf_counter() - start
    assert elapsed is not None, "no content line"
    return elapsed


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def measure(direct: str, gateway: str, questions: list[str], rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"direct": [], "through": []}
    stages: dict[str, list[float]] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        for text in questions[:3]:   # warm both paths (connections, caches of the first turn)
            await first_line(client, direct, text)
            await first_line(client, gateway, text)
        for _ in range(rounds):
            for text in questions:
                results["direct"].append(await first_line(client, direct, text) * 1000)
                results["through"].append(await first_line(client, gateway, text) * 1000)
                answer = (await client.post(f"{gateway}/rag/query", json={"query": text, "mode": "mix"})).json()
                for stage, ms in (answer.get("timings") or {}).items():
                    stages.setdefault(stage, []).append(float(ms))
    return {**results, **{f"stage {k}": v for k, v in stages.items()}}


async def query_cpu(gateway: str, pid: int, questions: list[str], count: int,
                    knobs: dict[str, object]) -> tuple[float, dict[str, list[float]]]:
    """The gateway's CPU milliseconds a /rag/query over ``count`` queries, and their stages."""
    stages: dict[str, list[float]] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        for text in questions[:20]:   # warm (connections, caches of the first turns)
            await client.post(f"{gateway}/rag/query", json={"query": text, "mode": "mix", **knobs})
        for _ in range(60):   # the start-up's background work done (the gateway idle), or 30 s
            before = cpu_seconds(pid)
            await asyncio.sleep(0.5)
            if cpu_seconds(pid) - before < 0.02:
                break
        start = cpu_seconds(pid)
        for i in range(count):
            answer = (await client.post(f"{gateway}/rag/query", json={"query": questions[i % len(questions)],
                                                                       "mode": "mix", **knobs})).json()
            for stage, ms in (answer.get("timings") or {}).items():
                stages.setdefault(stage, []).append(float(ms))
        return (cpu_seconds(pid) - start) * 1000 / max(count, 1), stages


def report(figures: dict[str, list[float]]) -> None:
    direct, through = figures["direct"], figures["through"]
    print("| path | p50 ms | p95 ms | n |\n|---|---:|---:|---:|")
    for name in ("direct", "through"):
        print(f"| {name} | {statistics.median(figures[name]):.2f} | {pct(figures[name], 0.95):.2f} | "
              f"{len(figures[name])} |")
    added = [t - d for t, d in zip(through, direct, strict=True)]
    print(f"\nfirst line added by GraphGate: p50 {statistics.median(through) - statistics.median(direct):.2f} ms "
          f"(pairwise p50 {statistics.median(added):.2f} ms)\n")
    print("| /rag/query stage | p50 ms |\n|---|---:|")
    for name, values in figures.items():
        if name.startswith("stage "):
            print(f"| {name[6:]} | {statistics.median(values):.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", type=Path, help="collapsed py-spy stacks of the gateway during the turns")
    parser.add_argument("--keep", type=Path, help="a directory for the store, kept: a second run reuses it")
    parser.add_argument("--cpu-queries", type=int, default=0, help="then N /rag/query: the gateway's CPU a query")
    parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                        help="a knob for the --cpu-queries queries (repeatable), e.g. effort=light")
    args = parser.parse_args(argv)
    corpus = make_corpus(args.documents)
    rng = random.Random(11)
    questions = [question(corpus, rng, follow_up=False) for _ in range(args.questions)]
    config = FakeConfig(port=free_port(), entity_types=corpus.entity_types, first_token=(0.0, 0.0),
                        token_interval=(0.0, 0.0), extract_delay=0.0, keyword_delay=0.0, embed_delay=0.0)
    work = args.keep or Path(tempfile.mkdtemp(prefix="grounded-turn-"))
    work.mkdir(parents=True, exist_ok=True)
    servers = start_servers(config, {}, work)
    try:
        stored = httpx.get(f"{servers.gateway}/rag/stats").json()["documents"].get("processed", 0)
        if stored < args.documents:
            ingestion = Ingestion()
            started = time.monotonic()
            asyncio.run(ingest(servers.gateway, corpus, ingestion, asyncio.Event(), 3600))
            assert ingestion.finished is not None and not ingestion.upload_errors, "ingestion did not finish"
            print(f"# {args.documents} documents ingested in {time.monotonic() - started:.0f} s: "
                  f"{json.dumps(ingestion.stats.get('documents'))}\n")
        else:
            print(f"# {stored} documents already in {work}\n")
        spy = None
        if args.profile is not None:
            spy_bin = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
            if spy_bin is None:
                print("py-spy is not installed: no profile")
            else:
                spy = subprocess.Popen([spy_bin, "record", "--format", "raw", "--rate", "250", "--output",
                                        str(args.profile), "--pid", str(servers.gate.pid)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)
        if args.rounds:
            figures = asyncio.run(measure(servers.direct, servers.gateway, questions, args.rounds))
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
            report(figures)
        if args.cpu_queries:
            knobs = dict(parse_knob(item) for item in args.set)
            cpu, stages = asyncio.run(query_cpu(servers.gateway, servers.gate.pid, questions, args.cpu_queries, knobs))
            print(f"\n{args.cpu_queries} /rag/query {knobs or ''}: gateway CPU {cpu:.1f} ms a query; stages p50: "
                  + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in stages.items()))
    finally:
        servers.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
