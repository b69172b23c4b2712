"""Console page latency on a large store built directly (no LLM).

Builds a store through ``KnowledgeStore.apply`` (the gateway's own commit path) in batches: N
entities with invented names of a dozen types and ~2 relations each (power-law degrees, so there
are hubs with thousands of relations and leaves with one), ~20,000 chunks of ~1,200 tokens across
~500 documents with their extraction results, LLM cache entries of every kind, chat traces,
aliases and dismissed suggestions; embeddings are random unit vectors (around random centres).
Then starts the fake Ollama and ``graphgate serve`` (a separate process, so its RSS is its own and
the client does not share its GIL) on 127.0.0.1 over that data directory, and times every console
page with httpx: 3 warm-ups (the first is reported as "first": a cold cache, e.g. the merge
suggestions after a commit), then R sequential requests each; p50/p95/max in ms.

    python bench/console.py [--entities 100000] [--dim 768] [--requests 30] [--keep DIR]
                            [--chunks 20000] [--documents 500] [--cache-per-kind 2000]

``--keep DIR`` builds the store in DIR and leaves it there; when DIR already holds one, it is
reused as it is (no build). 100k entities take about 2.5 minutes to build on 2 cores (1.9 GB).

Target (2 cores): every console page p95 <= 150 ms with 100k entities.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.console_store import COMMON, build  # noqa: E402
from bench.proxy_overhead import free_port  # noqa: E402

TARGET_MS = 150.0
def probe(data: Path) -> dict[str, Any]:
    """What the page addresses need, read from the store (before the gateway opens it)."""
    import duckdb

    con = duckdb.connect(str(data / "graphgate.duckdb"), read_only=True)
    try:
        def one(sql: str, *parameters: Any) -> tuple[Any, ...]:
            row = con.execute(sql, list(parameters)).fetchone()
            if row is None:
                raise RuntimeError(f"the store has no row for {sql}")
            return row

        degrees = """SELECT k, count(*) AS n FROM (SELECT source AS k FROM relations UNION ALL
                     SELECT target FROM relations) GROUP BY k"""
        hub, hub_degree = one(f"{degrees} ORDER BY n DESC, k LIMIT 1")
        leaf = one(f"{degrees} HAVING count(*) = 1 ORDER BY k LIMIT 1")[0]
        second = one(f"{degrees} ORDER BY n DESC, k LIMIT 1 OFFSET 1")[0]
        kind = one("SELECT type FROM entities GROUP BY type ORDER BY count(*) DESC LIMIT 1")[0]
        return {
            "hub": hub, "hub_degree": hub_degree, "leaf": leaf, "second": second, "type": kind,
            "common_hits": one("SELECT count(*) FROM entities WHERE name ILIKE ?", f"%{COMMON}%")[0],
            "document": one("SELECT id FROM documents WHERE status = 'processed' ORDER BY chunks_total DESC, id "
                            "LIMIT 1")[0],
            "cache_key": one("SELECT key FROM llm_cache WHERE kind = 'extract' ORDER BY strlen(request) DESC "
                             "LIMIT 1")[0],
            "trace": one("SELECT max(id) FROM traces")[0],
            "counts": {t: one(f"SELECT count(*) FROM {t}")[0] for t in
                       ("entities", "relations", "chunks", "documents", "extractions", "llm_cache", "traces")},
        }
    finally:
        con.close()


def pages(p: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    from admin.rendering import ref

    hx = {"HX-Request": "true", "HX-Target": "entity-table"}
    hub, leaf = ref(p["hub"]), ref(p["leaf"])
    return [
        ("dashboard", "/admin/", {}),
        ("pipeline fragment", "/admin/fragments/pipeline", {}),
        ("documents", "/admin/documents", {}),
        ("documents q+status+sort", "/admin/documents?q=doc-1&status=processed&sort=name", {}),
        ("documents page 5", "/admin/documents?page=5", {}),
        ("document", f"/admin/documents/{p['document']}", {}),
        ("entities (degree)", "/admin/entities", {}),
        ("entities sort=name", "/admin/entities?sort=name", {}),
        (f"entities q={COMMON}", f"/admin/entities?q={COMMON}", {}),
        (f"entities type={p['type']}", f"/admin/entities?type={p['type']}", {}),
        ("entities page 100", "/admin/entities?page=100", {}),
        ("entities htmx fragment", "/admin/entities", hx),
        (f"entities htmx q={COMMON}", f"/admin/entities?q={COMMON}", hx),
        (f"entity hub (deg {p['hub_degree']})", f"/admin/entities/{hub}", {}),
        ("entity leaf (deg 1)", f"/admin/entities/{leaf}", {}),
        ("graph hub depth=2", f"/admin/graph?entity={hub}&depth=2", {}),
        ("merge 2 keys", f"/admin/merge?key={hub}&key={ref(p['second'])}", {}),
        (f"merge 2 keys + q={COMMON}", f"/admin/merge?key={hub}&key={ref(p['second'])}&q={COMMON}", {}),
        ("suggestions", "/admin/suggestions", {}),
        ("cache", "/admin/cache", {}),
        ("cache/extract", "/admin/cache/extract", {}),
        (f"cache/extract q={COMMON}", f"/admin/cache/extract?q={COMMON}", {}),
        ("cache entry", f"/admin/cache/extract/{ref(p['cache_key'])}", {}),
        ("chats", "/admin/chats", {}),
        ("chat", f"/admin/chats/{p['trace']}", {}),
        ("playground", "/admin/playground", {}),
        ("settings", "/admin/settings", {}),
    ]


def percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest rank: p95 of 30 samples is the 29th."""
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


def measure(url: str, wanted: list[tuple[str, str, dict[str, str]]], requests: int) -> list[dict[str, Any]]:
    import httpx

    results: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for label, path, headers in wanted:
            times, first, status, size = [], 0.0, 0, 0
            for i in range(3 + requests):
                start = time.perf_counter()
                response = client.get(path, headers=headers)
                elapsed = (time.perf_counter() - start) * 1000
                status, size = response.status_code, len(response.content)
                if i == 0:
                    first = elapsed
                elif i >= 3:
                    times.append(elapsed)
                if status != 200:
                    break
            times.sort()
            results.append({"label": label, "path": path, "status": status, "kb": size / 1000, "first": first,
                            "p50": percentile(times, 0.5) if times else math.nan,
                            "p95": percentile(times, 0.95) if times else math.nan,
                            "max": times[-1] if times else math.nan})
            r = results[-1]
            print(f"{label:<34} {r['status']:>4} {r['kb']:>8.0f} {r['first']:>8.1f} {r['p50']:>8.1f} "
                  f"{r['p95']:>8.1f} {r['max']:>8.1f}{'' if r['p95'] <= TARGET_MS else '  MISS'}", flush=True)
    return results


# --- running the gateway ------------------------------------------------------------------

def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def start_gateway(data: Path, upstream: str) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": "", "GRAPHGATE_UPSTREAM": upstream,
           "GRAPHGATE_HOST": "127.0.0.1", "GRAPHGATE_PORT": str(port), "GRAPHGATE_DATA_DIR": str(data),
           "GRAPHGATE_LOG_LEVEL": "warning"}
    env.pop("GRAPHGATE_ADMIN_PASSWORD", None)
    gate = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if gate.poll() is not None:
            raise RuntimeError(f"graphgate serve exited with {gate.returncode}")
        try:
            if httpx.get(url + "/admin/fragments/pipeline", timeout=2).status_code == 200:
                return gate, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    gate.terminate()
    raise RuntimeError(f"{url} did not start")


def disk_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.iterdir() if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=768, help="embedding dimension (random unit vectors)")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page (after 3 warm-ups)")
    parser.add_argument("--keep", type=Path, help="build the store here and keep it; reused when it exists")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--cache-per-kind", type=int, default=2_000)
    args = parser.parse_args()

    from tests.fake_ollama import FakeOllama

    data = args.keep or Path(tempfile.mkdtemp(prefix="gg-console-"))
    try:
        if (data / "graphgate.duckdb").exists():
            print(f"reusing the store in {data}")
        else:
            data.mkdir(parents=True, exist_ok=True)
            print(f"building {args.entities:,} entities, ~{2 * args.entities:,} relations, {args.chunks:,} chunks, "
                  f"{args.documents} documents, dim {args.dim} in {data}", flush=True)
            started = time.perf_counter()
            build(data, args.entities, args.dim, args.chunks, args.documents, args.cache_per_kind)
            print(f"built in {time.perf_counter() - started:.0f} s", flush=True)
        p = probe(data)
        counts = ", ".join(f"{v:,} {k}" for k, v in p["counts"].items())
        print(f"store: {counts}; {disk_bytes(data) / 1e9:.2f} GB on disk; "
              f"'{COMMON}' is in {p['common_hits']:,} names", flush=True)

        fake = FakeOllama(embed_dim=args.dim)
        with fake.serve() as upstream:
            started = time.perf_counter()
            gate, url = start_gateway(data, upstream)
            try:
                print(f"gateway up in {time.perf_counter() - started:.1f} s (RSS "
                      f"{status_kb(gate.pid, 'VmRSS') / 1024:,.0f} MB)\n", flush=True)
                print(f"{'page':<34} {'code':>4} {'KB':>8} {'first':>8} {'p50':>8} {'p95':>8} {'max':>8}  (ms)")
                results = measure(url, pages(p), args.requests)
                print(f"\ngateway RSS after the run {status_kb(gate.pid, 'VmRSS') / 1024:,.0f} MB "
                      f"(peak {status_kb(gate.pid, 'VmHWM') / 1024:,.0f} MB)")
            finally:
                gate.terminate()
                gate.wait(30)
        misses = [r["label"] for r in results if not r["p95"] <= TARGET_MS or r["status"] != 200]
        if misses:
            print(f"FAIL: {len(misses)} of {len(results)} pages miss p95 <= {TARGET_MS:.0f} ms (or failed): "
                  + "; ".join(misses))
        else:
            print(f"PASS: every page's p95 <= {TARGET_MS:.0f} ms ({len(results)} pages)")
    finally:
        if args.keep is None:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
