"""What a knowledge model (an alias, proxy/control/models.py) adds to a chat turn.

Starts the fake Ollama and GraphGate as real uvicorn processes on 127.0.0.1 (bench/proxy_overhead.py's
servers), makes a knowledge base ``bench`` (empty, like ``default``: no retrieval runs, so only
the alias's own work is measured) and a knowledge model ``bench-bot`` on it, then alternates
plain-model and alias chats and reports, for each, p50/p95 of:

  1. sequential non-streaming /api/chat calls;
  2. streamed chats of ``--lines`` lines, read to the end (every line renamed back to the alias).

The difference of the p50s is what the alias adds: the name lookup, the request rewritten, the
base leased, the reply renamed. Also times the lookup itself in-process among ``--aliases`` aliases.

    python bench/knowledge_models.py [--calls 400] [--lines 200] [--aliases 1000]

Target (issue 20): an alias lookup adds <= 0.2 ms to a turn.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proxy_overhead import percentile, start_servers  # noqa: E402
from proxy.control.models import KnowledgeModel, KnowledgeModels  # noqa: E402

MODEL = "llama3.2:latest"


def one_call(client: httpx.Client, model: str, stream: bool) -> tuple[float, float]:
    """(ms to the whole answer, ms to its first line)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    start = time.perf_counter()
    first = None
    if stream:
        with client.stream("POST", "/api/chat", json=body) as response:
            lines = 0
            for line in response.iter_lines():
                first = first or time.perf_counter()
                lines += bool(line)
            assert response.status_code == 200 and lines > 1, (response.status_code, lines)
            assert f'"model":"{model}"' in line, line
    else:
        response = client.post("/api/chat", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == model
    end = time.perf_counter()
    return (end - start) * 1000, ((first or end) - start) * 1000


Timings = dict[str, list[float]]


def alternate(client: httpx.Client, calls: int, stream: bool) -> tuple[Timings, Timings]:
    plain: Timings = {"whole": [], "first": []}
    alias: Timings = {"whole": [], "first": []}
    for _ in range(20):   # warm-up
        one_call(client, MODEL, stream)
        one_call(client, "bench-bot", stream)
    for _ in range(calls):
        for model, into in ((MODEL, plain), ("bench-bot", alias)):
            whole, first = one_call(client, model, stream)
            into["whole"].append(whole)
            into["first"].append(first)
    return plain, alias


def lookup_microseconds(aliases: int) -> float:
    registry = KnowledgeModels(Path(tempfile.mkdtemp(prefix="graphgate-bench-models-")))
    registry.held.value = {f"bot-{i}:latest": KnowledgeModel(f"bot-{i}:latest", MODEL, "default")
                       for i in range(aliases)}
    names = [f"bot-{i}" for i in range(0, aliases, max(aliases // 100, 1))] + [MODEL]
    rounds = 2000
    start = time.perf_counter()
    for _ in range(rounds):
        for name in names:
            registry.resolve(name)
    return (time.perf_counter() - start) / (rounds * len(names)) * 1e6


def report(label: str, plain: list[float], alias: list[float]) -> None:
    print(f"{label}: plain p50 {statistics.median(plain):.3f} ms p95 {percentile(plain, 95):.3f} ms | "
          f"alias p50 {statistics.median(alias):.3f} ms p95 {percentile(alias, 95):.3f} ms | "
          f"added p50 {statistics.median(alias) - statistics.median(plain):+.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--aliases", type=int, default=1000)
    args = parser.parse_args()
    print(f"lookup among {args.aliases} aliases: {lookup_microseconds(args.aliases):.2f} us per name")
    processes, _direct, gateway = start_servers(args.lines)
    try:
        with httpx.Client(base_url=gateway, timeout=30) as client:
            assert client.post("/rag/kbs", json={"name": "bench"}).status_code == 201
            created = client.put("/rag/models/bench-bot", json={"model": MODEL, "kb": "bench"})
            assert created.status_code == 201, created.text
            plain, alias = alternate(client, args.calls, stream=False)
            report("non-streaming /api/chat", plain["whole"], alias["whole"])
            plain, alias = alternate(client, args.calls // 2, stream=True)
            report(f"streamed /api/chat, first line of {args.lines}", plain["first"], alias["first"])
            report(f"streamed /api/chat, all {args.lines} lines", plain["whole"], alias["whole"])
    finally:
        for process in processes:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
