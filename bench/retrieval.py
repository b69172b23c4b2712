"""Mix-mode retrieval latency, start-up time and memory on stores built directly (no LLM).

Builds N chunks of ~200 tokens with 0.5 entities and 1 relation per chunk and 768-dimensional
embeddings (clustered, like real ones), then, in a fresh process per size: opens the store as the
gateway does (start-up = process start to first answered query), runs Q mix-mode retrievals with
the keywords given and the question embedded by a local function (the upstream is not timed),
and reports p50/p95 latency and peak RSS.

    python bench/retrieval.py [--sizes 10000 100000 1000000] [--queries 200] [--filters]

``--filters`` also times metadata-filtered retrievals (docs/metadata-filters.md): every document
gets {"part": i % 10}, then a filter keeping a tenth of the store ({"part": 3}: searched by
over-fetching the indexes) and one keeping a single document (searched exactly) each run Q times;
"first" is the first query of a filter (its scope computed), the rest reuse the cached scope.

Targets (2 cores): 100k chunks p50 <= 25 ms, p95 <= 60 ms; 1M chunks p50 <= 80 ms; start-up with
1M chunks <= 15 s; RSS at 1M chunks <= 4 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIM = 768
WORDS = ("river harbour engine council ledger orbit canyon violet meadow signal archive lantern summit "
         "quartz falcon ember glacier compass").split()


def vectors(rng: np.random.Generator, centers: np.ndarray, n: int) -> np.ndarray:
    v = centers[rng.integers(0, len(centers), n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def column(matrix: np.ndarray) -> pa.Array:
    offsets = np.arange(0, matrix.size + 1, DIM, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(matrix.ravel()))


def build(data: Path, n_chunks: int) -> None:
    """Tables, indexes and graph exactly as the gateway stores them, written in bulk."""
    from proxy.core.settings import Settings
    from proxy.store.duckdb.connection import bump_generation, set_meta
    from proxy.store.store import KnowledgeStore, now
    from tests.invariants import database

    rng = np.random.default_rng(7)
    centers = rng.standard_normal((500, DIM)).astype(np.float32)
    settings = Settings.load()  # GRAPHGATE_VECTOR_DTYPE and GRAPHGATE_DB_MEMORY apply, as in the gateway
    store = anyio.run(KnowledgeStore.open, data, settings.vector_dtype, settings.db_memory)
    con = database(store).con  # the benchmark writes its rows in bulk, straight into the tables
    stamp = now()
    n_entities, n_docs = n_chunks // 2, max(n_chunks // 50, 1)
    filler = " ".join(WORDS * 10)  # ~200 tokens
    step = 100_000
    for start in range(0, n_chunks, step):
        ids = np.arange(start, min(start + step, n_chunks))
        con.register("c", pa.table({"id": [f"chunk-{i}" for i in ids], "key": ids + 1,
                                    "content": [f"passage {i} {filler}" for i in ids], "tokens": [200] * len(ids),
                                    "embedding": column(vectors(rng, centers, len(ids)))}))
        con.execute("INSERT INTO chunks SELECT * FROM c")
        con.register("l", pa.table({"document_id": [f"doc-{i % n_docs}" for i in ids],
                                    "chunk_id": [f"chunk-{i}" for i in ids], "ord": ids // n_docs}))
        con.execute("INSERT INTO document_chunks SELECT * FROM l")
    con.register("d", pa.table({"id": [f"doc-{i}" for i in range(n_docs)],
                                "name": [f"doc-{i}.txt" for i in range(n_docs)]}))
    con.execute("INSERT INTO documents (id, name, mime, size, status, text, chunks_total, chunks_done, created_at, "
                "updated_at) SELECT id, name, 'text/plain', 1, 'processed', '', 50, 50, ?, ? FROM d", [stamp, stamp])
    for start in range(0, n_entities, step):
        ids = np.arange(start, min(start + step, n_entities))
        con.register("e", pa.table({"name_key": [f"entity {i}" for i in ids], "name": [f"Entity {i}" for i in ids],
                                    "key": ids + 10_000_001, "type": ["Person"] * len(ids),
                                    "description": [f"Entity {i} appears in passages {2 * i} and {2 * i + 1}."
                                                    for i in ids],
                                    "source_ids": [[f"chunk-{2 * i}", f"chunk-{2 * i + 1}"] for i in ids],
                                    "embed_hash": [""] * len(ids),
                                    "embedding": column(vectors(rng, centers, len(ids)))}))
        con.execute("INSERT INTO entities SELECT *, ?, ? FROM e", [stamp, stamp])
    for start in range(0, n_chunks, step):
        ids = np.arange(start, min(start + step, n_chunks))
        a = rng.integers(0, n_entities, len(ids))
        b = (a + 1 + rng.integers(0, n_entities - 1, len(ids))) % n_entities
        s, t = np.minimum(a, b), np.maximum(a, b)
        con.register("r", pa.table({"pair_key": [f"entity {x}\x1fentity {y}" for x, y in zip(s, t, strict=True)],
                                    "source": [f"entity {x}" for x in s], "target": [f"entity {y}" for y in t],
                                    "key": ids + 20_000_001, "keywords": [["works with"]] * len(ids),
                                    "description": [f"Entity {x} works with entity {y}."
                                                    for x, y in zip(s, t, strict=True)],
                                    "weight": [1.0] * len(ids), "source_ids": [[f"chunk-{i}"] for i in ids],
                                    "embed_hash": [""] * len(ids),
                                    "embedding": column(vectors(rng, centers, len(ids)))}))
        con.execute("INSERT OR IGNORE INTO relations SELECT *, ?, ? FROM r", [stamp, stamp])
    set_meta(con, "embed_dim", DIM)
    set_meta(con, "embed_model", "nomic-embed-text")
    bump_generation(con)
    con.execute("CHECKPOINT")
    store.rebuild_sync()  # indexes, rows and graph from the tables, as `graphgate reindex` does
    anyio.run(store.close)


MEASURE = r"""
import json, sys, time
started = time.perf_counter()
import anyio, numpy as np
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from proxy.core.settings import Settings
from proxy.store.backends import backend_for
from proxy.store.store import KnowledgeStore
from proxy.retrieval.retriever import Retriever
from proxy.retrieval.params import QueryParams
from proxy.retrieval.budget import Budget
from proxy.core.tokens import get_tokenizer

async def main():
    settings = Settings.load()
    store = await KnowledgeStore.open(Path(sys.argv[1]), settings.vector_dtype, settings.db_memory,
                                      backend_for(settings.store, "default"))   # GRAPHGATE_STORE: bench/backends.py
    from types import SimpleNamespace
    # no upstream: questions are embedded by the local function below, which the trace names
    retriever = Retriever(store, SimpleNamespace(search_model="local"), settings, get_tokenizer())
    rng = np.random.default_rng(11)
    async def embed(query, keywords, question_vector=None):  # a local function: the upstream is not timed
        v = rng.standard_normal(768).astype(np.float32); v /= np.linalg.norm(v)
        return {"query": v, "low": v, "high": v}
    retriever._embed = embed
    budget = Budget(0, "none", 0, 0, 30000, 30000, 6000, 8000)
    params = QueryParams.from_settings(settings, mode="mix", ll_keywords=("entity",), hl_keywords=("works with",),
                                       cosine_threshold=0.0)
    filters = json.loads(sys.argv[4])
    if filters:
        await store.tables.documents.db.write(lambda con: con.execute(
            "UPDATE documents SET metadata = '{\"part\": ' || "
            "(CAST(regexp_extract(id, '[0-9]+') AS INTEGER) % 10) || '}'"))
    first = await retriever.retrieve("q", [], params, budget)
    startup = time.perf_counter() - started
    while not store.names.ready:   # entity linking's name index is built beside the first queries
        await anyio.sleep(0.05)
    names = time.perf_counter() - started

    async def timed(wanted, count):   # (sorted milliseconds of count retrievals, the last retrieval)
        spent = []
        for _ in range(count):
            t = time.perf_counter()
            last = await retriever.retrieve("q", [], wanted, budget)
            spent.append((time.perf_counter() - t) * 1000)
        return sorted(spent), last

    times, r = await timed(params, int(sys.argv[3]))
    filtered = {}
    for spec in filters:
        wanted = params.with_overrides({"filters": spec})
        (cold,), f = await timed(wanted, 1)   # the first: its scope is computed
        warm, f = await timed(wanted, int(sys.argv[3]))
        filtered[json.dumps(spec)] = {"first": cold, "p50": warm[len(warm) // 2], "p95": warm[int(len(warm) * 0.95)],
                                      "documents": f.filtered["documents"], "chunks": len(f.context.chunks),
                                      "cited": sorted({d for c in f.context.chunks for d in c.documents})[:3]}
    print(json.dumps({"filtered": filtered, "startup": startup, "names": names, "p50": times[len(times) // 2],
                      "p95": times[int(len(times) * 0.95)],
                      # VmHWM, not ru_maxrss: the latter is inherited from the parent that built the store
                      "rss_mb": int(next(line for line in open("/proc/self/status")
                                         if line.startswith("VmHWM")).split()[1]) / 1024,
                      "entities": len(r.context.entities), "relations": len(r.context.relations),
                      "chunks": len(r.context.chunks), "tokens": r.context.tokens["total"]}))
    await store.close()

anyio.run(main)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--filters", action="store_true", help="also time metadata-filtered retrievals")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="build each store in DIR/<size> and keep it; a store already there is reused")
    args = parser.parse_args()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": ""}
    for size in args.sizes:
        data = args.keep / str(size) if args.keep else Path(tempfile.mkdtemp(prefix=f"gg-retrieval-{size}-"))
        try:
            t = time.perf_counter()
            if not (data / "graphgate.duckdb").exists():
                data.mkdir(parents=True, exist_ok=True)
                build(data, size)
            built = time.perf_counter() - t
            disk = sum(p.stat().st_size for p in data.iterdir() if p.is_file()) / 1e9
            filters = [{"part": 3}, {"$document": "doc-5.txt"}] if args.filters else []
            out = subprocess.run([sys.executable, "-c", MEASURE, str(data), str(ROOT), str(args.queries),
                                  json.dumps(filters)],
                                 capture_output=True, text=True, env=env, check=True).stdout
            m = json.loads(out)
            print(f"{size:>9,} chunks: mix p50 {m['p50']:6.1f} ms, p95 {m['p95']:6.1f} ms; "
                  f"start-up {m['startup']:5.1f} s (name index {m['names']:.1f} s); "
                  f"peak RSS {m['rss_mb']:,.0f} MB; built in {built:.0f} s, "
                  f"{disk:.2f} GB on disk; context "
                  f"{m['entities']} entities, {m['relations']} relations, {m['chunks']} chunks, {m['tokens']} tokens",
                  flush=True)
            for spec, f in m["filtered"].items():
                print(f"{'':>9}  filter {spec}: {f['documents']} documents; first {f['first']:6.1f} ms, "
                      f"then p50 {f['p50']:6.1f} ms, p95 {f['p95']:6.1f} ms; {f['chunks']} chunks from {f['cited']}",
                      flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
