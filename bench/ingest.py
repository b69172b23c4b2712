"""Ingestion throughput and pipeline efficiency, with the fake Ollama as the model.

Generates N documents of ~1,500 tokens (invented names, so extraction finds entities and
relations), starts the fake upstream and a real `graphgate serve` as separate processes on
127.0.0.1, uploads everything through /rag/documents and waits until all are processed.

  (a) instant upstream: chunks/s end to end, peak RSS of the gateway, store size per 1,000 chunks;
  (b) every LLM call answered after 200 ms, GRAPHGATE_LLM_CONCURRENCY=4: pipeline efficiency =
      achieved LLM calls/s divided by the ideal 4 / 0.2 s = 20 calls/s.

    python bench/ingest.py [--docs 500] [--concurrency-a 2] [--skip-a] [--skip-b] [--docs-b 500] [--probe-loop]

(a) runs at the default LLM concurrency of 2 unless --concurrency-a says otherwise.

Targets (2 cores): (a) >= 100 chunks/s; (b) >= 90 %.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy_overhead import cpu_seconds, free_port, percentile, wait_ready  # noqa: E402
from proxy.cli.commands import UPLOADS_IN_FLIGHT  # noqa: E402

SYLLABLES = ["ka", "zor", "vel", "mir", "tan", "quo", "rex", "lun", "dra", "pel", "sif", "nox", "bri", "tal"]

FAKE = r"""
import json, re, sys, time, uvicorn
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.fake_ollama import FakeOllama

names = set(json.load(open(sys.argv[2])))
words = re.compile(r"\w+")  # names looked up in a set: a 2,000-way regex alternation cost the fake 9 ms a chunk
calls = []

def extract(request):
    calls.append(time.monotonic())
    user = request["messages"][-1]["content"]
    if "summary" in (request.get("format") or {}).get("properties", {}):
        return json.dumps({"summary": user[:300]})
    if "already found" in user:
        return json.dumps({"entities": [], "relations": []})
    entities, relations = {}, []
    for sentence in re.split(r"(?<=[.])\s+", user):
        found = list(dict.fromkeys(w for w in words.findall(sentence) if w in names))
        for name in found:
            entities.setdefault(name, {"name": name, "type": "Person", "description": sentence[:200]})
        for a, b in zip(found, found[1:]):
            relations.append({"source": a, "target": b, "keywords": ["works with"], "description": sentence[:200],
                              "weight": 1})
    return json.dumps({"entities": list(entities.values()), "relations": relations})

fake = FakeOllama(embed_dim=768)
fake.structured = extract
fake.reply_delay = float(sys.argv[3])
fake.requests = type("Discard", (list,), {"append": lambda self, item: None})()

async def stats(request):
    return JSONResponse({"calls": len(calls), "first": calls[0] if calls else 0, "last": calls[-1] if calls else 0})

fake.app.router.routes.insert(0, Route("/__stats", stats))
uvicorn.run(fake.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def invented_names(count: int, rng: random.Random) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add("".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize())
    return sorted(names)


def make_documents(count: int, names: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """Each document has a cast of 8 of the invented people (about 8 entities and 15 relations per
    chunk, a typical density for extraction), and the casts overlap across documents."""
    docs = []
    for d in range(count):
        sentences: list[str] = []
        cast = rng.sample(names, 8)
        while len(" ".join(sentences)) < 6400:  # ~1,500 cl100k tokens of this text
            a, b = rng.sample(cast, 2)
            sentences.append(f"{a} and {b} reviewed report {rng.randint(1, 9999)} about the {rng.choice(SYLLABLES)}"
                             f"{rng.choice(SYLLABLES)} programme in district {rng.randint(1, 99)}.")
        docs.append((f"doc-{d:04d}.txt", " ".join(sentences)))
    return docs


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class LoopProbe(threading.Thread):
    """GET /api/version every ``every`` seconds while documents are ingested: how long the
    gateway's event loop keeps a trivial request waiting (its stalls)."""

    def __init__(self, url: str, every: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.latencies: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stopped.wait(self.every):
                start = time.perf_counter()
                client.get("/api/version")
                self.latencies.append(time.perf_counter() - start)

    def figures(self) -> str:
        if not self.latencies:
            return "no probes"
        ms = [1000 * latency for latency in self.latencies]
        return (f"{len(ms)} probes: p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms, "
                f"max {max(ms):.1f} ms (target max <= 50 ms)")


def run(docs: list[tuple[str, str]], names_file: Path, delay: float, concurrency: int,
        probe: bool = False) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="gg-bench-"))
    fake_port, gate_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    fake = subprocess.Popen([sys.executable, "-c", FAKE, str(fake_port), str(names_file), str(delay)],
                            env=env, cwd=ROOT)
    upstream = f"http://127.0.0.1:{fake_port}"
    gate_env = {**env, "GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_PORT": str(gate_port),
                "GRAPHGATE_DATA_DIR": str(data), "GRAPHGATE_LOG_LEVEL": "warning",
                "GRAPHGATE_LLM_CONCURRENCY": str(concurrency), "GRAPHGATE_PARALLEL_DOCUMENTS": str(concurrency * 2)}
    gate = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=gate_env, cwd=ROOT)
    url = f"http://127.0.0.1:{gate_port}"
    try:
        wait_ready(upstream)
        wait_ready(url)
        prober = LoopProbe(url) if probe else None
        with httpx.Client(base_url=url, timeout=60) as client:
            if prober is not None:
                prober.start()
            start = time.perf_counter()
            # as `graphgate ingest` does: UPLOADS_IN_FLIGHT uploads at a time
            with ThreadPoolExecutor(UPLOADS_IN_FLIGHT) as pool:
                codes = list(pool.map(lambda doc: client.post("/rag/documents", json={"name": doc[0], "text": doc[1]})
                                      .status_code, docs))
            assert codes == [202] * len(docs), set(codes)
            uploaded = time.perf_counter() - start
            while True:
                stats = client.get("/rag/stats").json()
                done = stats["documents"]["processed"] + stats["documents"]["failed"]
                if done == len(docs):
                    break
                time.sleep(0.2)
            elapsed = time.perf_counter() - start
            if prober is not None:
                prober.stopped.set()
                prober.join()
            calls = httpx.get(upstream + "/__stats").json()
        rss = peak_rss_mb(gate.pid)
        cpu = {"gateway": cpu_seconds(gate.pid), "upstream": cpu_seconds(fake.pid)}
        gate.terminate()
        gate.wait(30)
        size = sum(p.stat().st_size for p in data.iterdir() if p.is_file())
        return {"seconds": elapsed, "chunks": stats["chunks"], "failed": stats["documents"]["failed"],
                "entities": stats["entities"], "relations": stats["relations"], "rss_mb": rss,
                "bytes": size, "llm_calls": calls["calls"], "llm_span": calls["last"] - calls["first"], "cpu": cpu,
                "uploaded": uploaded, "probe": prober.figures() if prober is not None else None}
    finally:
        for process in (gate, fake):
            if process.poll() is None:
                process.terminate()
                process.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--docs-b", type=int, default=500)
    parser.add_argument("--concurrency-a", type=int, default=2, help="GRAPHGATE_LLM_CONCURRENCY for (a)")
    parser.add_argument("--skip-a", action="store_true")
    parser.add_argument("--skip-b", action="store_true")
    parser.add_argument("--probe-loop", action="store_true",
                        help="during (a), GET /api/version every 5 ms: the event loop's stalls (costs (a) a little)")
    args = parser.parse_args()
    rng = random.Random(42)
    names = invented_names(2000, rng)
    names_file = Path(tempfile.mkstemp(suffix=".json")[1])
    names_file.write_text(__import__("json").dumps(names))
    if not args.skip_a:
        a = run(make_documents(args.docs, names, rng), names_file, 0.0, args.concurrency_a, args.probe_loop)
        print(f"(a) {args.docs} documents, LLM concurrency {args.concurrency_a}, {a['chunks']} chunks in "
              f"{a['seconds']:.1f} s: {a['chunks'] / a['seconds']:.0f} chunks/s (target >= 100); failed {a['failed']}")
        print(f"    {a['entities']} entities, {a['relations']} relations; peak RSS {a['rss_mb']:.0f} MB; "
              f"store {a['bytes'] / 1e6:.1f} MB = {a['bytes'] / 1e6 / a['chunks'] * 1000:.1f} MB per 1,000 chunks")
        print(f"    uploads ({UPLOADS_IN_FLIGHT} at a time, as `graphgate ingest` sends them) "
              f"took {a['uploaded']:.1f} s of it")
        print(f"    CPU per chunk: gateway {1000 * a['cpu']['gateway'] / a['chunks']:.1f} ms, fake upstream "
              f"{1000 * a['cpu']['upstream'] / a['chunks']:.1f} ms (both on the same 2 cores)")
        if a["probe"]:
            print(f"    the event loop meanwhile: {a['probe']}")
    if not args.skip_b:
        b = run(make_documents(args.docs_b, names, rng), names_file, 0.2, 4)
        rate = b["llm_calls"] / b["llm_span"] if b["llm_span"] else 0
        print(f"(b) {args.docs_b} documents, {b['llm_calls']} LLM calls of 200 ms at concurrency 4 in "
              f"{b['llm_span']:.1f} s: {rate:.2f} calls/s = {100 * rate / 20:.0f}% of the ideal 20/s (target >= 90%); "
              f"end to end {b['seconds']:.1f} s, failed {b['failed']}")


if __name__ == "__main__":
    main()
