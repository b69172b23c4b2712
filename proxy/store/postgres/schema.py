"""The PostgreSQL schema of one knowledge base (a PostgreSQL schema of its own), versioned.

The tables are the embedded store's (``proxy/store/duckdb/schema.py``, at its version 7) with
PostgreSQL's types: ``text`` for VARCHAR, ``text[]`` for lists, ``timestamp`` (UTC, as the embedded
store keeps them) and pgvector's ``vector`` for embeddings. An embedding column is typed with its
dimension, and given its HNSW index, when the first embedding is committed (``commit.py``): the
dimension is only known then. Two more tables serve several replicas: ``change_log`` (each commit's
changes, which the other replicas replay into their in-memory graph and rows) and the lease columns
on ``documents`` (the ingestion queue).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

V1 = """
CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
CREATE SEQUENCE vector_keys START 1;

CREATE TABLE documents (
    id text PRIMARY KEY,
    name text NOT NULL,
    mime text NOT NULL,
    size bigint NOT NULL,
    status text NOT NULL,
    error text,
    text text NOT NULL,
    chunks_total integer NOT NULL DEFAULT 0,
    chunks_done integer NOT NULL DEFAULT 0,
    replaces text,
    created_at timestamp NOT NULL,
    updated_at timestamp NOT NULL,
    processed_at timestamp,
    metadata text NOT NULL DEFAULT '{}',
    lease_owner text,                  -- the replica extracting it (status processing)
    lease_until timestamp              -- past it, another replica takes the document over
);
CREATE INDEX documents_status ON documents (status);

CREATE TABLE chunks (
    id text PRIMARY KEY,
    key bigint NOT NULL,
    content text NOT NULL,
    tokens integer NOT NULL,
    embedding vector NOT NULL
);
CREATE INDEX chunks_key ON chunks (key);

CREATE TABLE document_chunks (
    document_id text NOT NULL,
    chunk_id text NOT NULL,
    ord integer NOT NULL,
    PRIMARY KEY (document_id, ord)
);
CREATE INDEX document_chunks_chunk ON document_chunks (chunk_id);

CREATE TABLE extractions (
    chunk_id text PRIMARY KEY,
    model text NOT NULL,
    result text NOT NULL,
    raw text NOT NULL,
    created_at timestamp NOT NULL
);

CREATE TABLE entities (
    name_key text PRIMARY KEY,
    name text NOT NULL,
    key bigint NOT NULL,
    type text NOT NULL,
    description text NOT NULL,
    source_ids text[] NOT NULL,
    embed_hash text NOT NULL,
    embedding vector NOT NULL,
    created_at timestamp NOT NULL,
    updated_at timestamp NOT NULL
) WITH (fillfactor = 70);   -- room for in-place (heap-only) updates, which add no HNSW entry: commit.py
CREATE INDEX entities_key ON entities (key);

CREATE TABLE relations (
    pair_key text PRIMARY KEY,
    source text NOT NULL,
    target text NOT NULL,
    key bigint NOT NULL,
    keywords text[] NOT NULL,
    description text NOT NULL,
    weight double precision NOT NULL,
    source_ids text[] NOT NULL,
    embed_hash text NOT NULL,
    embedding vector NOT NULL,
    created_at timestamp NOT NULL,
    updated_at timestamp NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX relations_key ON relations (key);

CREATE TABLE llm_cache (
    kind text NOT NULL,
    key text NOT NULL,
    model text NOT NULL,
    request text NOT NULL,
    response text NOT NULL,
    hits integer NOT NULL DEFAULT 0,
    kb_version bigint,
    created_at timestamp NOT NULL,
    last_hit_at timestamp,
    PRIMARY KEY (kind, key)
);
CREATE INDEX llm_cache_key ON llm_cache (key);

CREATE TABLE aliases (
    alias_key text PRIMARY KEY,
    target_key text NOT NULL,
    created_at timestamp NOT NULL
);

CREATE SEQUENCE trace_ids START 1;
CREATE TABLE traces (
    id bigint PRIMARY KEY DEFAULT nextval('trace_ids'),
    created_at timestamp NOT NULL,
    api text NOT NULL,
    model text NOT NULL,
    mode text NOT NULL,
    query text NOT NULL,
    augmented boolean NOT NULL,
    reason text,
    detail text NOT NULL
);

CREATE TABLE entity_edits (
    name_key text PRIMARY KEY,
    name text,
    type text,
    description text,
    updated_at timestamp NOT NULL
);
CREATE TABLE relation_edits (
    pair_key text PRIMARY KEY,
    keywords text[],
    description text,
    weight double precision,
    updated_at timestamp NOT NULL
);
CREATE TABLE dismissed_suggestions (
    pair_key text PRIMARY KEY,
    created_at timestamp NOT NULL
);

CREATE TABLE communities (
    id text PRIMARY KEY,
    key bigint NOT NULL,
    title text NOT NULL,
    summary text NOT NULL,
    members text[] NOT NULL,
    digest text NOT NULL,
    embedding vector NOT NULL,
    created_at timestamp NOT NULL,
    updated_at timestamp NOT NULL
);
CREATE INDEX communities_key ON communities (key);

-- each commit's changes (without embeddings: they are in the tables), by generation: the other
-- replicas replay them into their in-memory rows and graph (proxy/store/postgres/follow.py)
CREATE TABLE change_log (
    generation bigint PRIMARY KEY,
    changes jsonb NOT NULL,
    created_at timestamp NOT NULL
);
INSERT INTO meta VALUES ('generation', '0');
"""

# v2: as the embedded store's v7 (proxy/store/duckdb/schema.py): each vector table's embedding model
# and dimension, and the staged vectors of a re-embedding under way (of any dimension: untyped)
V2 = """
INSERT INTO meta
    SELECT m.key || ':' || t.name, m.value FROM meta m,
           (VALUES ('chunks'), ('entities'), ('relations'), ('communities')) t(name)
    WHERE m.key IN ('embed_model', 'embed_dim')
    ON CONFLICT (key) DO NOTHING;
CREATE TABLE reembedding (
    tbl text NOT NULL,
    id text NOT NULL,
    model text NOT NULL,
    source text NOT NULL,
    embed_hash text,
    embedding vector NOT NULL,
    PRIMARY KEY (tbl, id)
);
"""

# v3: as the embedded store's v8: an alias made by entity resolution keeps its reason and evidence
V3 = """
ALTER TABLE aliases ADD COLUMN reason text NOT NULL DEFAULT '';
ALTER TABLE aliases ADD COLUMN evidence text NOT NULL DEFAULT '';
"""

MIGRATIONS: tuple[str, ...] = (V1, V2, V3)
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(con: psycopg.Connection, schema: str) -> int:
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s "
                         "AND table_name = 'meta'", [schema]).fetchone()
    if not exists or not exists[0]:
        return 0
    row = con.execute(sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
        sql.Identifier(schema))).fetchone()
    return int(row[0]) if row else 0


def migrate(con: psycopg.Connection, schema: str) -> int:
    """Create ``schema`` if needed and bring it to SCHEMA_VERSION in one transaction, under
    an advisory lock (replicas starting together migrate once); refuse one written by a newer
    GraphGate. ``con`` is in autocommit."""
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(hashtext('graphgate-migrate'))")
        # the extension is the database's, shared by every knowledge base
        con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        con.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        version = current_version(con, schema)
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"the store has schema version {version}, newer than this GraphGate "
                               f"({SCHEMA_VERSION}); upgrade GraphGate")
        con.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)))
        for number in range(version + 1, SCHEMA_VERSION + 1):
            con.execute(MIGRATIONS[number - 1])
            con.execute("INSERT INTO meta VALUES ('schema_version', %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value", [str(number)])
    return SCHEMA_VERSION


def drop(con: psycopg.Connection, schema: str) -> None:
    """Remove a knowledge base's schema and everything in it (the base's deletion)."""
    con.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
