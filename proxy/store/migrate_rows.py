"""What ``graphgate migrate-store`` copies: every table of a knowledge base's store, its columns with
their PostgreSQL types (the embedded store's, ``duckdb/schema.py`` at version 6, as
``postgres/schema.py`` types them), and the checksum both sides are held to after the copy.

A row travels between the engines as a tuple of plain Python values: str, int, float, bool, None,
lists of str, naive UTC datetimes, and embeddings as float32 numpy arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

Row = tuple[Any, ...]
EMBEDDING = "vector"   # the column type of embeddings (pgvector's name; FLOAT[] in DuckDB)
# meta rows each engine writes for itself: neither copied nor compared
ENGINE_META = ("schema_version", "vector_index")


class MigrationError(Exception):
    """A sentence for the person running the migration: nothing more to say than it."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[tuple[str, str], ...]   # (column, PostgreSQL type), in the embedded store's order
    primary_key: tuple[str, ...]
    sequence: str | None = None            # the sequence its ``key`` / ``id`` column draws from
    where: str = ""                        # rows left out (SQL both engines read)
    batch_rows: int = 4096                 # rows per batch read and written (documents hold whole texts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(kind for _, kind in self.columns)

    def position(self, column: str) -> int:
        return self.names.index(column)


def _columns(text: str) -> tuple[tuple[str, str], ...]:
    """``"id text, size bigint"`` -> (("id", "text"), ("size", "bigint"))."""
    pairs = (part.strip().split(" ", 1) for part in text.split(","))
    return tuple((name, kind.strip()) for name, kind in pairs)


TS = "timestamp"
TABLES: tuple[TableSpec, ...] = (
    TableSpec("meta", _columns("key text, value text"), ("key",),
              where="key NOT IN ({})".format(", ".join(f"'{k}'" for k in ENGINE_META))),
    TableSpec("documents", _columns(f"id text, name text, mime text, size bigint, status text, error text, "
                                    f"text text, chunks_total integer, chunks_done integer, replaces text, "
                                    f"created_at {TS}, updated_at {TS}, processed_at {TS}, metadata text"),
              ("id",), batch_rows=64),
    TableSpec("chunks", _columns(f"id text, key bigint, content text, tokens integer, embedding {EMBEDDING}"),
              ("id",), sequence="vector_keys"),
    TableSpec("document_chunks", _columns("document_id text, chunk_id text, ord integer"), ("document_id", "ord"),
              batch_rows=65536),
    TableSpec("extractions", _columns(f"chunk_id text, model text, result text, raw text, created_at {TS}"),
              ("chunk_id",), batch_rows=1024),
    TableSpec("entities", _columns(f"name_key text, name text, key bigint, type text, description text, "
                                   f"source_ids text[], embed_hash text, embedding {EMBEDDING}, created_at {TS}, "
                                   f"updated_at {TS}"), ("name_key",), sequence="vector_keys"),
    TableSpec("relations", _columns(f"pair_key text, source text, target text, key bigint, keywords text[], "
                                    f"description text, weight double precision, source_ids text[], "
                                    f"embed_hash text, embedding {EMBEDDING}, created_at {TS}, updated_at {TS}"),
              ("pair_key",), sequence="vector_keys"),
    TableSpec("llm_cache", _columns(f"kind text, key text, model text, request text, response text, hits integer, "
                                    f"kb_version bigint, created_at {TS}, last_hit_at {TS}"), ("kind", "key"),
              batch_rows=1024),
    TableSpec("aliases", _columns(f"alias_key text, target_key text, created_at {TS}, reason text, evidence text"),
              ("alias_key",)),
    TableSpec("traces", _columns(f"id bigint, created_at {TS}, api text, model text, mode text, query text, "
                                 f"augmented boolean, reason text, detail text"), ("id",), sequence="trace_ids",
              batch_rows=256),
    TableSpec("entity_edits", _columns(f"name_key text, name text, type text, description text, updated_at {TS}"),
              ("name_key",)),
    TableSpec("relation_edits", _columns(f"pair_key text, keywords text[], description text, "
                                         f"weight double precision, updated_at {TS}"), ("pair_key",)),
    TableSpec("dismissed_suggestions", _columns(f"pair_key text, created_at {TS}"), ("pair_key",)),
    TableSpec("communities", _columns(f"id text, key bigint, title text, summary text, members text[], digest text, "
                                      f"embedding {EMBEDDING}, created_at {TS}, updated_at {TS}"),
              ("id",), sequence="vector_keys"),
)
SEQUENCES = ("vector_keys", "trace_ids")
# the column of each table its sequence numbers
SEQUENCE_COLUMN = {"vector_keys": "key", "trace_ids": "id"}


def _canonical(value: Any) -> Any:
    """The same value from either engine renders the same: texts and numbers as they are, lists as
    tuples, timestamps in ISO form."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    return value


class TableDigest:
    """Rows counted and hashed: each row's md5 (its values rendered canonically, embeddings as
    float32 bytes), then one md5 over them in primary key order. Also the largest value the table
    took from its sequence."""

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.rows = 0
        self.highest = 0
        self._keyed: list[tuple[tuple[Any, ...], bytes]] = []
        self._key_at = tuple(spec.position(c) for c in spec.primary_key)
        self._vectors = tuple(i for i, kind in enumerate(spec.types) if kind == EMBEDDING)
        self._sequence_at = spec.position(SEQUENCE_COLUMN[spec.sequence]) if spec.sequence else None

    def add(self, rows: Iterable[Row]) -> None:
        vectors = self._vectors
        for row in rows:
            plain = tuple(None if i in vectors else _canonical(v) for i, v in enumerate(row))
            digest = hashlib.md5(repr(plain).encode("utf-8", "surrogatepass"), usedforsecurity=False)
            for i in vectors:
                digest.update(np.asarray(row[i], dtype=np.float32).tobytes())
            self._keyed.append((tuple(row[i] for i in self._key_at), digest.digest()))
            if self._sequence_at is not None and row[self._sequence_at] > self.highest:
                self.highest = row[self._sequence_at]
            self.rows += 1

    def hexdigest(self) -> str:
        total = hashlib.md5(usedforsecurity=False)
        for _, digest in sorted(self._keyed):
            total.update(digest)
        return total.hexdigest()
