"""Committing a changeset to PostgreSQL in one transaction (under the knowledge base's advisory
lock: ``connection.PgDatabase.write``; ``sql_commit.write_changes``), with its entry in the change
log and a notification for the other replicas; and the reads the store's bookkeeping needs (keys,
counts)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from proxy.store.change_log import encode
from proxy.store.changes import Changeset, ChunkRow, IndexDelta
from proxy.store.postgres.connection import DIALECT, Con, bump_generation, get_meta, set_meta
from proxy.store.sql_commit import ROW_COLUMNS
from proxy.store.sql_commit import write_changes as write_changes_with
from proxy.store.sql_dialect import Sql
from proxy.store.sql_documents import status_counts
from proxy.store.vector_models import VECTOR_TABLES

CHANNEL = "graphgate_changes"   # NOTIFY payload: "<schema>:<generation>"
# the change log keeps the last KEEP_GENERATIONS commits, and any younger than KEEP_SECONDS (a replica
# restarting reads the tables, not the log); it is trimmed every TRIM_EVERY commits
KEEP_GENERATIONS = 1000
KEEP_SECONDS = 3600
TRIM_EVERY = 100
# HNSW build parameters: the embedded store's USearch ones (connectivity 16, expansion_add 40:
# proxy/store/vectors_usearch.py), not pgvector's default ef_construction of 64, whose inserts (what a
# commit spends most on) ran 40-60 % slower at 768 dimensions here for 0.05-0.1 more recall at
# ef_search 128 on bench/pg_feasibility.py's (hard) corpus
HNSW = "WITH (m = 16, ef_construction = 40)"
PLAIN_DIMENSIONS = 1024   # 4 KB a vector: with the row's other columns still within an 8 KB page


def table_keys(con: Con, table: str) -> np.ndarray:
    rows = con.execute(sql.SQL("SELECT key FROM {}").format(sql.Identifier(table))).fetchall()
    return np.asarray([r[0] for r in rows], dtype=np.uint64)


def table_counts(con: Con) -> dict[str, Any]:
    """The counts of one snapshot, with the generation they are of."""
    with con.transaction():
        con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        generation = int(get_meta(con, "generation", "0") or 0)
        by_status = status_counts(Sql(con, DIALECT))
        row = con.execute("""SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM entities),
                                    (SELECT count(*) FROM relations), (SELECT count(*) FROM extractions),
                                    (SELECT count(*) FROM llm_cache), (SELECT count(*) FROM communities)""").fetchone()
    if row is None:
        raise RuntimeError("no row from the counts")
    return {"documents": {s: by_status.get(s, 0) for s in ("pending", "processing", "processed", "failed")},
            "chunks": row[0], "entities": row[1], "relations": row[2], "extractions": row[3],
            "cache_entries": row[4], "communities": row[5], "table_generation": generation}


def vector_index_kind(con: Con, dtype: str) -> str:
    """The index for GRAPHGATE_VECTOR_DTYPE, as USearch's element types trade memory for recall:
    f32 ``vector``; f16 ``halfvec`` (an index on the 16-bit cast); i8 ``bit`` (pgvector has no 8-bit
    type: an index on the binary quantisation, its candidates re-ranked by the full vectors). Both
    casts need pgvector 0.7; before it, ``vector``. At 768 dimensions here (20k rows indexed, 2k
    inserted, bench/backends.py's corpus) inserts ran 1,123 / 857 / 2,068 rows/s and recall@10 at 128
    candidates was 0.999 / 0.997 / 1.000: the binary index is the cheapest to keep up while ingesting."""
    row = con.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    major, minor = (int(part) for part in str(row[0] if row else "0.0").split(".")[:2])
    if (major, minor) < (0, 7):
        return "vector"
    return {"f16": "halfvec", "i8": "bit"}.get(dtype, "vector")


INDEXED_EXPRESSIONS = {   # kind -> (what the HNSW index is on, its operator class)
    "vector": ("embedding", "vector_cosine_ops"),
    "halfvec": ("(embedding::halfvec({dim}))", "halfvec_cosine_ops"),
    "bit": ("(binary_quantize(embedding)::bit({dim}))", "bit_hamming_ops"),
}


def type_embeddings(con: Con, dim: int, dtype: str) -> None:
    """Give every embedding column its dimension and its HNSW index (first embedding committed, or
    a re-embedding with a model of another dimension). The kind is recorded for the searches."""
    kind = vector_index_kind(con, dtype)
    expression, operators = INDEXED_EXPRESSIONS[kind]
    for table in VECTOR_TABLES:
        name = sql.Identifier(table)
        index = sql.Identifier(f"{table}_embedding")
        con.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(index))
        # in the row, not out of line (TOAST): a search re-ranks its candidates by their full vectors,
        # 30 % faster so at 768 dimensions here; a vector too big for a page stays out of line
        storage = "PLAIN" if dim <= PLAIN_DIMENSIONS else "EXTERNAL"
        con.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE {}").format(name, sql.SQL(storage)))
        con.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector({}) USING embedding::vector({})")
                    .format(name, sql.Literal(dim), sql.Literal(dim)))
        con.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw ({} {}) " + HNSW).format(
            index, name, sql.SQL(expression.format(dim=int(dim))), sql.SQL(operators)))
    set_meta(con, "embed_dim", dim)
    set_meta(con, "vector_index", kind)


def write_changes(con: Con, changes: Changeset, dtype: str) -> tuple[dict[str, IndexDelta], int]:
    """The changeset in the caller's transaction (``sql_commit.write_changes``). It assigns the rows'
    vector keys; when it fails they are put back, so that the transaction can be tried again from
    the start."""
    rows: list[Any] = [*changes.chunks_added, *changes.entities_upserted, *changes.relations_upserted,
                       *changes.communities_upserted]
    keys = [row.key for row in rows]
    try:
        return write_changes_with(con, changes, PgCommits(dtype))
    except BaseException:
        for row, key in zip(rows, keys, strict=True):
            row.key = key
        raise


def log_change(con: Con, generation: int, changes: dict[str, Any], stamp: datetime) -> None:
    """The commit's entry in the change log, and a wake-up for the replicas following it (delivered
    when the transaction commits, in commit order)."""
    con.execute("INSERT INTO change_log VALUES (%s, %s, %s)", [generation, Jsonb(changes), stamp])
    if generation % TRIM_EVERY == 0:   # a replica further behind finds a gap and reloads from the tables
        con.execute("DELETE FROM change_log WHERE generation <= %s AND created_at < %s - make_interval(secs => %s)",
                    [generation - KEEP_GENERATIONS, stamp, KEEP_SECONDS])
    con.execute("SELECT pg_notify(%s, current_schema() || ':' || %s)", [CHANNEL, str(generation)])


def _vector(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


class PgCommits:
    """``CommitStorage`` (proxy/store/sql_commit.py): PostgreSQL stores new rows a statement each in
    one round of ``executemany``, keeps a row whose vector stays in place, types the embedding
    columns once the first dimension is known (``dtype``: the kind of vector index), and logs the
    commit for the other replicas."""

    dialect = DIALECT

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def insert_chunks(self, con: Con, chunks: list[ChunkRow]) -> None:
        with con.cursor() as cursor:
            cursor.executemany("INSERT INTO chunks (id, key, content, tokens, embedding) VALUES (%s, %s, %s, %s, %s)",
                               [(c.id, c.key, c.content, c.tokens, _vector(c.embedding)) for c in chunks])

    def link_chunks(self, con: Con, links: list[tuple[str, str, int]]) -> None:
        with con.cursor() as cursor:
            cursor.executemany("INSERT INTO document_chunks VALUES (%s, %s, %s) ON CONFLICT (document_id, ord) "
                               "DO UPDATE SET chunk_id = excluded.chunk_id", links)

    def store_rows(self, con: Con, table: str, id_column: str, rows: list[Any],
                   old: dict[str, tuple[int, datetime]], rekeyed: list[Any], stamp: datetime) -> None:
        """A row whose embedding stays (same key) is updated in place without touching its embedding:
        PostgreSQL then adds no HNSW entry for it (a heap-only update, which the tables' fillfactor
        leaves room for), and an HNSW insert is what a commit spends most on (600-800 vectors/s at 768
        dimensions here, bench/backends.py). Only new and re-embedded rows are inserted."""
        added = {id(r) for r in rekeyed}
        kept = [r for r in rows if id(r) not in added and getattr(r, id_column) in old]
        inserted = [r for r in rows if id(r) in added or getattr(r, id_column) not in old]
        columns = ROW_COLUMNS[table]
        with con.cursor() as cursor:
            if kept:
                others = [c for c in columns if c not in (id_column, "key", "embedding")]
                update = sql.SQL("UPDATE {} SET {}, updated_at = %s WHERE {} = %s").format(
                    sql.Identifier(table),
                    sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in others),
                    sql.Identifier(id_column))
                cursor.executemany(update, [(*(getattr(r, c) for c in others), stamp, getattr(r, id_column))
                                            for r in kept])
            if inserted:
                cursor.execute(sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(
                    sql.Identifier(table), sql.Identifier(id_column)), [[getattr(r, id_column) for r in inserted]])
                insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    sql.Identifier(table),
                    sql.SQL(", ").join(map(sql.Identifier, (*columns, "created_at", "updated_at"))),
                    sql.SQL(", ").join(sql.Placeholder() * (len(columns) + 2)))
                created = [old[i][1] if (i := getattr(r, id_column)) in old else stamp for r in inserted]
                cursor.executemany(insert, [(*(_vector(r.embedding) if name == "embedding" else getattr(r, name)
                                               for name in columns), made, stamp)
                                            for r, made in zip(inserted, created, strict=True)])

    def update_documents(self, con: Con, updates: list[Any], stamp: datetime) -> None:
        """Every document's new status in one statement (a merge commits up to a batch of them); a
        document done or failed is no replica's work any more."""
        if not updates:
            return
        con.execute("""UPDATE documents d SET status = u.status, error = u.error, updated_at = %s,
                       chunks_total = coalesce(u.chunks_total, d.chunks_total),
                       chunks_done = coalesce(u.chunks_done, d.chunks_done),
                       processed_at = CASE WHEN u.status = 'processed' THEN %s ELSE d.processed_at END,
                       lease_owner = CASE WHEN u.status = 'processing' THEN d.lease_owner END,
                       lease_until = CASE WHEN u.status = 'processing' THEN d.lease_until END
                       FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[], %s::int[])
                            AS u(id, status, error, chunks_total, chunks_done)
                       WHERE d.id = u.id""",
                    [stamp, stamp, [u.id for u in updates], [u.status for u in updates], [u.error for u in updates],
                     [u.chunks_total for u in updates], [u.chunks_done for u in updates]])

    def first_dimension(self, con: Con, dim: int) -> None:
        type_embeddings(con, dim, self.dtype)

    def committed(self, con: Con, changes: Changeset, deltas: dict[str, IndexDelta], stamp: datetime) -> int:
        generation = bump_generation(con)
        log_change(con, generation, encode(changes, deltas), stamp)
        return generation
