"""Feasibility numbers for a PostgreSQL + pgvector store backend (issue 21), on a throwaway server.

Starts PostgreSQL 16.2 + pgvector 0.6.2 from PyPI's ``pgserver`` in a temporary directory (as root,
pgserver runs the server as a system user ``pgserver``, made with ``useradd`` if missing), then
measures, each part on its own:

- vectors: 100k 384-d unit vectors (clustered, as index_recall.py makes them) COPYed in binary,
  an HNSW index (vector_cosine_ops, m 16, ef_construction 64) built over them, then 10k more
  COPYed into the indexed table; top-10 p50 and recall against exact at ef_search 40/100/128,
  an exact (sequential) scan for reference, and the repo's USearch index (proxy/store/vectors_usearch.py,
  i8 and f32, the gateway's HNSW settings) on the same vectors and queries.
- notify: LISTEN/NOTIFY latency between two psycopg async connections (notify sent -> received).
- queue: a 2,000-job queue table drained by two connections with FOR UPDATE SKIP LOCKED, one job
  per transaction; checks that every job is taken exactly once.
- rebuild: 100k chunks, 100k entities, 200k relations, 100k document links written, then read back
  as a replica's start-up does (SELECT text, SELECT binary, COPY TO STDOUT binary), filling the
  repo's own MemoryRows and EntityGraph (igraph) from them.

    /work/i21-pg-venv/bin/python bench/pg_feasibility.py [--parts vectors,notify,queue,rebuild] [--n 100000]

Needs pgserver, psycopg[binary,pool], pgvector, numpy, usearch, python-igraph (not GraphGate's venv).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pgserver
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proxy.store.graph_igraph import EntityGraph  # noqa: E402
from proxy.store.rows_memory import MemoryRows  # noqa: E402
from proxy.store.vectors_usearch import VectorIndex  # noqa: E402

DIM = 384


def clock() -> float:
    return time.perf_counter()


def corpus(rng: np.random.Generator, n: int) -> np.ndarray:
    topics = rng.standard_normal((300, DIM)).astype(np.float32)
    v = topics[rng.integers(0, 300, n)] * 0.6 + rng.standard_normal((n, DIM)).astype(np.float32) * 0.5
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def one(con: psycopg.Connection, query: str) -> tuple[Any, ...]:
    """The query's single row."""
    row = con.execute(query).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


def recall(found: list[list[int]], truth: list[set[int]]) -> float:
    return float(np.mean([len(set(f) & t) / 10 for f, t in zip(found, truth, strict=True)]))


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.2f} ms, p95 {np.percentile(values, 95) * 1000:.2f} ms"


def insert(uri: str, first: int, rows: np.ndarray, each: bool = False) -> None:
    """``rows`` under ids from ``first``: one binary COPY, or (``each``) one INSERT per transaction."""
    with psycopg.connect(uri, autocommit=True) as con:
        register_vector(con)
        if each:
            for i, row in enumerate(rows):
                con.execute("INSERT INTO items (id, embedding) VALUES (%s, %s)", (first + i, row), prepare=True)
            return
        with con.cursor() as cur, cur.copy("COPY items (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "vector"])
            for i, row in enumerate(rows):
                copy.write_row((first + i, row))


def halfvec(con: psycopg.Connection, version: str, q: np.ndarray, truth: list[set[int]], fresh: np.ndarray) -> None:
    """The same rows as half-precision vectors (pgvector 0.7+): an HNSW index on the cast; then
    ``fresh`` rows COPYed with only that index to maintain (in a transaction rolled back)."""
    t = clock()
    con.execute(f"CREATE INDEX items_half ON items USING hnsw ((embedding::halfvec({DIM})) halfvec_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)")
    size = one(con, "SELECT pg_size_pretty(pg_relation_size('items_half'))")[0]
    print(f"pgvector {version} halfvec HNSW index (expression on the cast): {clock() - t:.1f} s, {size}", flush=True)
    for ef in (40, 100, 128):
        con.execute(f"SET hnsw.ef_search = {ef}")
        times, found = [], []
        for x in q:
            t = clock()
            rows = con.execute(f"SELECT id FROM items ORDER BY embedding::halfvec({DIM}) <=> %s::halfvec({DIM}) "
                               "LIMIT 10", (x,), prepare=True).fetchall()
            times.append(clock() - t)
            found.append([r[0] for r in rows])
        print(f"pgvector halfvec HNSW ef_search {ef}: top-10 {ms(times)}, recall {recall(found, truth):.3f}",
              flush=True)
    with con.transaction(force_rollback=True):
        con.execute("DROP INDEX items_hnsw")
        t = clock()
        with con.cursor() as cur, cur.copy("COPY items (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "vector"])
            for i, row in enumerate(fresh):
                copy.write_row((10**9 + i, row))
        took = clock() - t
    print(f"COPY binary {len(fresh)} more rows with only the halfvec index: {took:.1f} s "
          f"({len(fresh) / took:.0f} rows/s)", flush=True)
    con.execute("DROP INDEX items_half")


def vectors(uri: str, n: int, queries: int, ef_construction: int) -> None:
    rng = np.random.default_rng(7)
    v = corpus(rng, n + 35_000)
    base, extra = v[:n], v[n:n + 10_000]
    more = v[n + 10_000:n + 30_000]  # two 10k insert runs from two connections
    spare = v[n + 30_000:]  # 5k for the halfvec index alone
    q = base[rng.integers(0, n, queries)] + 0.05 * rng.standard_normal((queries, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    truth = [set(np.argsort(-(base @ x))[:10].tolist()) for x in q]
    with psycopg.connect(uri, autocommit=True) as con:
        con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(con)
        con.execute("DROP TABLE IF EXISTS items")
        con.execute(f"CREATE TABLE items (id bigint PRIMARY KEY, embedding vector({DIM}) NOT NULL)")
        t = clock()
        with con.cursor() as cur, cur.copy("COPY items (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "vector"])
            for i in range(n):
                copy.write_row((i, base[i]))
        print(f"COPY binary {n} x {DIM}-d rows (no index): {clock() - t:.1f} s", flush=True)
        con.execute("SET maintenance_work_mem = '1GB'")
        con.execute("SET max_parallel_maintenance_workers = 1")
        t = clock()
        con.execute("CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops) "
                    f"WITH (m = 16, ef_construction = {ef_construction})")
        print(f"CREATE INDEX hnsw vector_cosine_ops (m 16, ef_construction {ef_construction}) over {n} rows: "
              f"{clock() - t:.1f} s", flush=True)
        size = one(con, "SELECT pg_size_pretty(pg_relation_size('items_hnsw')), "
                        "pg_size_pretty(pg_relation_size('items'))")
        print(f"  index size {size[0]}, table size {size[1]}", flush=True)
        for ef in (40, 100, 128):
            con.execute(f"SET hnsw.ef_search = {ef}")
            times, found = [], []
            for x in q:
                t = clock()
                rows = con.execute("SELECT id FROM items ORDER BY embedding <=> %s LIMIT 10", (x,),
                                   prepare=True).fetchall()
                times.append(clock() - t)
                found.append([r[0] for r in rows])
            print(f"pgvector HNSW ef_search {ef}: top-10 {ms(times)}, recall {recall(found, truth):.3f}", flush=True)
        con.execute("SET enable_indexscan = off")
        times, found = [], []
        for x in q[:50]:  # its own SQL text and no prepared plan: psycopg would reuse the HNSW one
            t = clock()
            rows = con.execute("SELECT id FROM items /* exact */ ORDER BY embedding <=> %s LIMIT 10", (x,),
                               prepare=False).fetchall()
            times.append(clock() - t)
            found.append([r[0] for r in rows])
        print(f"pgvector exact scan (no index): top-10 {ms(times)}, recall {recall(found, truth[:50]):.3f}", flush=True)
        con.execute("SET enable_indexscan = on")
        version = one(con, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")[0]
        try:
            con.execute("SELECT '[1,2]'::halfvec")
        except psycopg.errors.UndefinedObject:
            print(f"halfvec: not in pgvector {version} (added in 0.7.0)", flush=True)
        else:
            halfvec(con, version, q, truth, spare)
    t = clock()
    insert(uri, n, extra)
    took = clock() - t
    print(f"COPY binary {len(extra)} more rows into the HNSW-indexed table, one connection: {took:.1f} s "
          f"({len(extra) / took:.0f} rows/s)", flush=True)
    half = len(extra) // 2
    t = clock()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: insert(uri, n + 10_000 + s, more[s:s + half]), (0, half)))
    took = clock() - t
    print(f"COPY binary {len(extra)} more rows into the HNSW-indexed table from 2 connections at once: "
          f"{took:.1f} s ({len(extra) / took:.0f} rows/s)", flush=True)
    t = clock()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: insert(uri, n + 20_000 + s, more[10_000 + s:10_000 + s + half], each=True),
                      (0, half)))
    took = clock() - t
    print(f"INSERT one row per transaction (synchronous_commit on), 2 connections, {len(extra)} rows: "
          f"{took:.1f} s ({len(extra) / took:.0f} rows/s)", flush=True)
    for dtype in ("i8", "f32"):
        index = VectorIndex(Path("unused.usearch"), dtype)
        t = clock()
        index.add(np.arange(n, dtype=np.uint64), base)
        built = clock() - t
        times, found = [], []
        for x in q:
            t = clock()
            keys = index.search(x, 10)
            times.append(clock() - t)
            found.append([k for k, _ in keys])
        print(f"USearch {dtype} (repo settings, ef 128): add {n} {built:.1f} s, top-10 {ms(times)}, "
              f"recall {recall(found, truth):.3f}", flush=True)


async def notify(uri: str, rounds: int) -> None:
    listener = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    sender = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    await listener.execute("LISTEN changes")
    received: asyncio.Queue[float] = asyncio.Queue()

    async def listen() -> None:
        async for _ in listener.notifies():
            received.put_nowait(clock())

    task = asyncio.create_task(listen())
    await asyncio.sleep(0.1)
    times = []
    for i in range(rounds):
        t = clock()
        await sender.execute("SELECT pg_notify('changes', %s)", (f"kb1:{i}",))
        times.append(await received.get() - t)
    print(f"LISTEN/NOTIFY psycopg async, {rounds} notifications: sent -> received {ms(times)}", flush=True)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task   # before closing: the connection's socket must leave the loop's readers first
    await listener.close()
    await sender.close()
    try:
        asyncpg = importlib.import_module("asyncpg")   # optional: not in every venv this runs from
    except ImportError:
        return
    listening, sending = await asyncpg.connect(uri), await asyncpg.connect(uri)
    arrived: asyncio.Queue[float] = asyncio.Queue()
    await listening.add_listener("changes", lambda *_: arrived.put_nowait(clock()))
    times = []
    for i in range(rounds):
        t = clock()
        await sending.execute("SELECT pg_notify('changes', $1)", f"kb1:{i}")
        times.append(await arrived.get() - t)
    print(f"LISTEN/NOTIFY asyncpg, {rounds} notifications: sent -> received {ms(times)}", flush=True)
    await listening.close()
    await sending.close()


async def queue(uri: str, jobs: int) -> None:
    setup = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    await setup.execute("DROP TABLE IF EXISTS jobs")
    await setup.execute("CREATE TABLE jobs (id bigint PRIMARY KEY, state text NOT NULL DEFAULT 'pending', "
                        "taken_by int, taken int NOT NULL DEFAULT 0, lease_until timestamptz)")
    await setup.execute("CREATE INDEX jobs_pending ON jobs (id) WHERE state = 'pending'")
    await setup.execute("INSERT INTO jobs (id) SELECT generate_series(1, %s)", (jobs,))

    async def worker(number: int) -> int:
        done = 0
        async with await psycopg.AsyncConnection.connect(uri) as con:
            while True:
                async with con.transaction():
                    row = await (await con.execute(
                        "SELECT id FROM jobs WHERE state = 'pending' ORDER BY id LIMIT 1 "
                        "FOR UPDATE SKIP LOCKED")).fetchone()
                    if row is None:
                        return done
                    await con.execute("UPDATE jobs SET state = 'done', taken_by = %s, taken = taken + 1, "
                                      "lease_until = now() + interval '30 s' WHERE id = %s", (number, row[0]))
                done += 1

    t = clock()
    counts = await asyncio.gather(worker(1), worker(2))
    took = clock() - t
    counted = await (await setup.execute("SELECT count(*) FROM jobs WHERE taken <> 1")).fetchone()
    twice = counted[0] if counted else None
    print(f"FOR UPDATE SKIP LOCKED, 2 connections, {jobs} jobs: {took:.2f} s ({jobs / took:.0f} jobs/s), "
          f"taken per worker {counts}, jobs not taken exactly once: {twice}", flush=True)
    await setup.close()


def rebuild(uri: str, chunks: int) -> None:
    rng = np.random.default_rng(11)
    entities, relations = chunks, 2 * chunks
    with psycopg.connect(uri, autocommit=True) as con:
        for table in ("chunks", "entities", "relations", "document_chunks", "documents"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute("CREATE TABLE chunks (id text PRIMARY KEY, key bigint NOT NULL)")
        con.execute("CREATE TABLE documents (id text PRIMARY KEY, name text NOT NULL)")
        con.execute("CREATE TABLE document_chunks (document_id text, chunk_id text, ord int, "
                    "PRIMARY KEY (document_id, ord))")
        con.execute("CREATE TABLE entities (name_key text PRIMARY KEY, name text NOT NULL, key bigint NOT NULL, "
                    "type text NOT NULL, source_ids text[] NOT NULL)")
        con.execute("CREATE TABLE relations (pair_key text PRIMARY KEY, source text NOT NULL, target text NOT NULL, "
                    "key bigint NOT NULL, keywords text[] NOT NULL, weight float8 NOT NULL, "
                    "source_ids text[] NOT NULL)")
        chunk_ids = [f"{rng.integers(0, 2**63):016x}{i:016x}" for i in range(chunks)]
        names = [f"entity number {i}" for i in range(entities)]
        types = ["person", "organisation", "place", "event", "concept", "technology"]
        t = clock()
        with con.cursor() as cur:
            with cur.copy("COPY chunks FROM STDIN") as copy:
                for i, c in enumerate(chunk_ids):
                    copy.write_row((c, i))
            with cur.copy("COPY documents FROM STDIN") as copy:
                for d in range(chunks // 100):
                    copy.write_row((f"doc{d}", f"document {d}.md"))
            with cur.copy("COPY document_chunks FROM STDIN") as copy:
                for i, c in enumerate(chunk_ids):
                    copy.write_row((f"doc{i // 100}", c, i % 100))
            with cur.copy("COPY entities FROM STDIN") as copy:
                for i, name in enumerate(names):
                    copy.write_row((name, name.title(), chunks + i, types[i % 6],
                                    [chunk_ids[j] for j in rng.integers(0, chunks, 1 + i % 3)]))
            ends = rng.integers(0, entities, (relations * 2, 2))
            ends = ends[ends[:, 0] != ends[:, 1]]
            ends.sort(axis=1)
            ends = np.unique(ends, axis=0)[:relations]
            with cur.copy("COPY relations FROM STDIN") as copy:
                for j, (a, b) in enumerate(ends.tolist()):
                    copy.write_row((f"{names[a]}\x1f{names[b]}", names[a], names[b], chunks + entities + j,
                                    ["works with", "part of"][: 1 + j % 2], float(1 + j % 4),
                                    [chunk_ids[int(rng.integers(0, chunks))]]))
        con.execute("ANALYZE")
        print(f"wrote {chunks} chunks, {entities} entities, {len(ends)} relations, {chunks} document links: "
              f"{clock() - t:.1f} s", flush=True)

        queries = {
            "chunks": ("SELECT id, key FROM chunks", ["text", "int8"]),
            "entities": ("SELECT key, name_key, name, type, source_ids FROM entities ORDER BY key",
                         ["int8", "text", "text", "text", "text[]"]),
            "relations": ("SELECT key, pair_key, keywords, weight, source_ids FROM relations",
                          ["int8", "text", "text[]", "float8", "text[]"]),
            "chunk_documents": ("SELECT dc.chunk_id, d.name FROM document_chunks dc "
                                "JOIN documents d ON d.id = dc.document_id",
                                ["text", "text"]),
            "edges": ("WITH vertex AS (SELECT name_key, row_number() OVER (ORDER BY key) - 1 AS i FROM entities) "
                      "SELECT s.i, t.i, r.weight FROM relations r JOIN vertex s ON s.name_key = r.source "
                      "JOIN vertex t ON t.name_key = r.target", ["int8", "int8", "float8"]),
        }

        def read(how: str, name: str) -> list[tuple]:
            query, kinds = queries[name]
            if how == "copy":
                with con.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
                    copy.set_types(kinds)
                    return list(copy.rows())
            with con.cursor(binary=how == "binary") as cur:
                return cur.execute(query).fetchall()

        keys = rng.integers(chunks, chunks + entities, (200, 20)).tolist()
        times = []
        for wanted in keys:  # what retrieval reads per turn: a few rows' texts by vector key
            t = clock()
            con.execute("SELECT key, name, type FROM entities WHERE key = ANY(%s)", (wanted,), prepare=True).fetchall()
            times.append(clock() - t)
        print(f"20 entity rows by vector key (key = ANY, no index on key): {ms(times)}", flush=True)
        con.execute("CREATE INDEX entities_key ON entities (key)")
        times = []
        for wanted in keys:
            t = clock()
            con.execute("SELECT key, name, type FROM entities WHERE key = ANY(%s) /* indexed */", (wanted,),
                        prepare=True).fetchall()
            times.append(clock() - t)
        print(f"20 entity rows by vector key (indexed): {ms(times)}", flush=True)

        for how in ("text", "binary", "copy"):
            t = clock()
            fetched = {name: read(how, name) for name in queries}
            read_s = clock() - t
            per = ", ".join(f"{k} {len(v)}" for k, v in fetched.items())
            t = clock()
            rows = MemoryRows()
            rows.load(fetched["chunks"], fetched["entities"], fetched["relations"], fetched["chunk_documents"])
            edges = np.asarray([(a, b) for a, b, _ in fetched["edges"]], dtype=np.int64)
            graph = EntityGraph()
            graph.load([r[1] for r in fetched["entities"]], edges, [w for _, _, w in fetched["edges"]])
            build_s = clock() - t
            print(f"rebuild via SELECT {how:6s}" if how != "copy" else "rebuild via COPY TO STDOUT binary",
                  f": read {read_s:.2f} s ({per}), MemoryRows + igraph {build_s:.2f} s, total {read_s + build_s:.2f} s "
                  f"(graph {graph.vertex_count} vertices, {graph.edge_count} edges)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="vectors,notify,queue,rebuild")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-construction", type=int, default=64, help="pgvector HNSW ef_construction")
    args = parser.parse_args()
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="pgfeas") as folder:
        t = clock()
        server = pgserver.get_server(folder, cleanup_mode="stop")
        uri = server.get_uri()
        print(f"pgserver start (initdb + postgres) in a new directory: {clock() - t:.2f} s", flush=True)
        with psycopg.connect(uri) as con:
            print("server:", one(con, "SELECT version()")[0][:40], flush=True)
        if "vectors" in parts:
            vectors(uri, args.n, args.queries, args.ef_construction)
        if "notify" in parts:
            asyncio.run(notify(uri, 500))
        if "queue" in parts:
            asyncio.run(queue(uri, 2000))
        if "rebuild" in parts:
            rebuild(uri, args.n)
        server.cleanup()


if __name__ == "__main__":
    main()
