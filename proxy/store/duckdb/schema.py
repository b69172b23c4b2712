"""The DuckDB schema, versioned. Each migration moves the store up one version, in a transaction.

DuckDB is the source of truth: the vector indexes and the graph are rebuilt from it. Every row
that has an embedding also has a ``key``: the integer the vector index knows it by. A changed
embedding gets a new key, so "is the index in step with the tables?" is a comparison of key sets.
"""

from __future__ import annotations

import duckdb

V1 = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE SEQUENCE vector_keys START 1;

CREATE TABLE documents (
    id VARCHAR PRIMARY KEY,            -- content hash of the extracted text
    name VARCHAR NOT NULL,
    mime VARCHAR NOT NULL,
    size BIGINT NOT NULL,
    status VARCHAR NOT NULL,           -- pending | processing | processed | failed
    error VARCHAR,
    text VARCHAR NOT NULL,             -- kept so that an interrupted document resumes without its file
    chunks_total INTEGER NOT NULL DEFAULT 0,
    chunks_done INTEGER NOT NULL DEFAULT 0,
    replaces VARCHAR,                  -- id of the older version this one replaces once processed
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    processed_at TIMESTAMP
);

CREATE TABLE chunks (
    id VARCHAR PRIMARY KEY,            -- content hash: shared by every document that contains it
    key BIGINT NOT NULL,               -- from the vector_keys sequence: unique by construction
    content VARCHAR NOT NULL,
    tokens INTEGER NOT NULL,
    embedding FLOAT[] NOT NULL
);

CREATE TABLE document_chunks (
    document_id VARCHAR NOT NULL,
    chunk_id VARCHAR NOT NULL,
    ord INTEGER NOT NULL,
    PRIMARY KEY (document_id, ord)
);

CREATE TABLE extractions (
    chunk_id VARCHAR PRIMARY KEY,      -- content hash: nothing is ever extracted twice
    model VARCHAR NOT NULL,
    result VARCHAR NOT NULL,           -- normalised ExtractionResult JSON (all passes merged)
    raw VARCHAR NOT NULL,              -- the model's replies as received
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE entities (
    name_key VARCHAR PRIMARY KEY,      -- case-folded name: the identity
    name VARCHAR NOT NULL,             -- canonical spelling
    key BIGINT NOT NULL,               -- from the vector_keys sequence: unique by construction
    type VARCHAR NOT NULL,
    description VARCHAR NOT NULL,
    source_ids VARCHAR[] NOT NULL,
    embed_hash VARCHAR NOT NULL,       -- hash of the text the embedding was made from
    embedding FLOAT[] NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);

CREATE TABLE relations (
    pair_key VARCHAR PRIMARY KEY,      -- "<source key>\x1f<target key>", endpoints sorted: undirected
    source VARCHAR NOT NULL,           -- entity name_key
    target VARCHAR NOT NULL,
    key BIGINT NOT NULL,               -- from the vector_keys sequence: unique by construction
    keywords VARCHAR[] NOT NULL,
    description VARCHAR NOT NULL,
    weight DOUBLE NOT NULL,
    source_ids VARCHAR[] NOT NULL,
    embed_hash VARCHAR NOT NULL,
    embedding FLOAT[] NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);

CREATE TABLE llm_cache (
    kind VARCHAR NOT NULL,             -- extract | summary | keywords | answer
    key VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    request VARCHAR NOT NULL,
    response VARCHAR NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    kb_version BIGINT,
    created_at TIMESTAMP NOT NULL,
    last_hit_at TIMESTAMP,
    PRIMARY KEY (kind, key)
);

CREATE TABLE aliases (
    alias_key VARCHAR PRIMARY KEY,     -- a merged-away name keeps resolving to its target
    target_key VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL
);
"""

# v2: the trace of each chat turn, for the console (the last 500 are kept); indexes on vector keys
V2 = """
CREATE SEQUENCE trace_ids START 1;
CREATE TABLE traces (
    id BIGINT PRIMARY KEY DEFAULT nextval('trace_ids'),
    created_at TIMESTAMP NOT NULL,
    api VARCHAR NOT NULL,              -- ollama | openai | query
    model VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    query VARCHAR NOT NULL,
    augmented BOOLEAN NOT NULL,
    reason VARCHAR,                    -- why the turn was not augmented, when it was not
    detail VARCHAR NOT NULL            -- JSON: keywords, entities, relations, chunk ids, tokens, timings, budget
);
-- retrieval looks rows up by their vector key
CREATE INDEX chunks_key ON chunks (key);
CREATE INDEX entities_key ON entities (key);
CREATE INDEX relations_key ON relations (key);
"""

# v3: hand edits from the console, re-applied whenever a name is recomputed from its sources (so an
# edit survives re-ingestion), and merge suggestions someone dismissed
V3 = """
CREATE TABLE entity_edits (
    name_key VARCHAR PRIMARY KEY,
    name VARCHAR,                      -- NULL: keep what extraction says
    type VARCHAR,
    description VARCHAR,
    updated_at TIMESTAMP NOT NULL
);
CREATE TABLE relation_edits (
    pair_key VARCHAR PRIMARY KEY,
    keywords VARCHAR[],
    description VARCHAR,
    weight DOUBLE,
    updated_at TIMESTAMP NOT NULL
);
CREATE TABLE dismissed_suggestions (
    pair_key VARCHAR PRIMARY KEY,      -- the two entity keys, sorted, as for relations
    created_at TIMESTAMP NOT NULL
);
"""

# v4: LLM cache reads look a reply up by its key; DuckDB uses an index only for a single column,
# so the (kind, key) primary key left every lookup scanning the whole cache
V4 = """
CREATE INDEX llm_cache_key ON llm_cache (key);
"""

# v5: community summaries for global questions (Leiden communities of the graph, each summarised by
# the extraction model when the pipeline is idle): searchable by their vector key like the graph rows
V5 = """
CREATE TABLE communities (
    id VARCHAR PRIMARY KEY,            -- hash of the sorted member entity keys: the identity
    key BIGINT NOT NULL,               -- from the vector_keys sequence: unique by construction
    title VARCHAR NOT NULL,
    summary VARCHAR NOT NULL,
    members VARCHAR[] NOT NULL,        -- member entity keys, most central first
    digest VARCHAR NOT NULL,           -- hash of what the summary was written from (members' vector keys)
    embedding FLOAT[] NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE INDEX communities_key ON communities (key);
"""

# v6: each document's metadata (a small JSON object: source, category...), which retrieval filters on
V6 = """
ALTER TABLE documents ADD COLUMN metadata VARCHAR NOT NULL DEFAULT '{}';
"""

# v7: each vector table records the embedding model its vectors come from and their dimension (a
# store made before kept one record for all: every table takes it on), and the vectors of a
# re-embedding under way are staged beside the rows, a batch a transaction, until they are all
# made and swapped in at once (proxy/store/vector_models.py, proxy/store/duckdb/reembed.py)
V7 = """
INSERT OR IGNORE INTO meta
    SELECT m.key || ':' || t.name, m.value FROM meta m,
           (VALUES ('chunks'), ('entities'), ('relations'), ('communities')) t(name)
    WHERE m.key IN ('embed_model', 'embed_dim');
CREATE TABLE reembedding (
    tbl VARCHAR NOT NULL,              -- chunks | entities | relations
    id VARCHAR NOT NULL,               -- the row's id (chunk id, name key, pair key)
    model VARCHAR NOT NULL,            -- the model being re-embedded to
    source VARCHAR NOT NULL,           -- what the vector was made from: the row's embed_hash then (chunks: their id)
    embed_hash VARCHAR,                -- the row's embed_hash once the vector is swapped in (entities, relations)
    embedding FLOAT[] NOT NULL,
    PRIMARY KEY (tbl, id)
);
"""

# v8: an alias made by entity resolution at ingestion says why (its reason) and shows the text that
# said so (its evidence), for the console to show and undo; a merge by hand leaves both empty
V8 = """
ALTER TABLE aliases ADD COLUMN reason VARCHAR NOT NULL DEFAULT '';
ALTER TABLE aliases ADD COLUMN evidence VARCHAR NOT NULL DEFAULT '';
"""

MIGRATIONS: tuple[str, ...] = (V1, V2, V3, V4, V5, V6, V7, V8)
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'").fetchone()
    if not exists or not exists[0]:
        return 0
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the database to SCHEMA_VERSION; refuse one written by a newer GraphGate."""
    version = current_version(con)
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"the store has schema version {version}, newer than this GraphGate "
                           f"({SCHEMA_VERSION}); upgrade GraphGate")
    for number in range(version + 1, SCHEMA_VERSION + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(MIGRATIONS[number - 1])
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(number)])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return SCHEMA_VERSION
