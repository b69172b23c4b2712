"""The PostgreSQL side of ``graphgate migrate-store``: a knowledge base's schema read and written by
binary COPY (pgvector's binary format for the embeddings).

A copy into a schema is one transaction: the schema is (re)created by ``postgres/schema.py``'s
``migrate``, the rows are copied, the sequences advanced, and the embedding columns typed with
their dimension (``commit.type_embeddings``) before the rows arrive; their HNSW indexes are built
once the rows are in (a bulk build is many times faster than one insert at a time into the index).
The change log is not copied: the schema starts a fresh one, at the copied generation. The lease
columns of ``documents`` stay empty.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from proxy.store.migrate_rows import EMBEDDING, MigrationError, Row, TableSpec
from proxy.store.postgres.commit import type_embeddings
from proxy.store.postgres.schema import SCHEMA_VERSION, current_version, drop, migrate

CONNECT_SECONDS = 10
# a bulk HNSW build keeps its graph in maintenance_work_mem (a slow build on disk otherwise): per
# vector about its floats plus its neighbour lists
INDEX_BYTES_PER_VECTOR = 700
INDEX_MEMORY_CAP = 2 << 30   # a server of a few GB keeps room for its other work


def shown(dsn: str) -> str:
    """The URI without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", dsn)


def connect(dsn: str) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_SECONDS)
    except psycopg.Error as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MigrationError(f"cannot connect to the PostgreSQL server at {shown(dsn)}: {detail}") from None


def knowledge_schemas(con: psycopg.Connection) -> list[str]:
    """The schemas on the server that hold a knowledge base (``kb_<name>`` with a meta table)."""
    rows = con.execute("SELECT schemaname FROM pg_tables WHERE tablename = 'meta' AND schemaname LIKE 'kb%%' "
                       "ORDER BY schemaname").fetchall()
    return [row[0] for row in rows if row[0].startswith("kb_")]


def holds_documents(con: psycopg.Connection, schema: str) -> bool:
    exists = con.execute("SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'documents')",
                         [schema]).fetchone()
    if exists != (True,):
        return False
    row = con.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.documents)").format(sql.Identifier(schema))).fetchone()
    return row == (True,)


def _where(spec: TableSpec) -> sql.Composable:
    return sql.SQL(" WHERE " + spec.where) if spec.where else sql.SQL("")


def _columns(spec: TableSpec) -> sql.Composable:
    return sql.SQL(", ").join(map(sql.Identifier, spec.names))


class PostgresSide:
    """One knowledge base's schema, on a connection of its own (autocommit outside the copy's transaction)."""

    builds_indexes = True   # the HNSW indexes, in the copy's transaction

    def __init__(self, dsn: str, schema: str, *, source: bool) -> None:
        self.schema = schema
        self.label = f"PostgreSQL schema {schema} at {shown(dsn)}"
        self.con = connect(dsn)
        try:
            if source:
                version = current_version(self.con, schema)
                if version != SCHEMA_VERSION:
                    raise MigrationError(f"schema {schema} has version {version}, this GraphGate copies version "
                                         f"{SCHEMA_VERSION}: start the gateway of its version on it first")
                self._use_schema()
        except BaseException:
            self.con.close()
            raise

    def _use_schema(self) -> None:
        self.con.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self.schema)))
        register_vector(self.con)

    def close(self) -> None:
        self.con.close()

    # --- reading ---

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read of the block from one snapshot of the schema (a replica still committing
        cannot tear the copy between two tables)."""
        with self.con.transaction():
            self.con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def columns(self) -> dict[str, list[str]]:
        rows = self.con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
                                [self.schema]).fetchall()
        found: dict[str, list[str]] = {}
        for table, column in rows:
            found.setdefault(table, []).append(column)
        return found

    def count(self, spec: TableSpec) -> int:
        row = self.con.execute(sql.SQL("SELECT count(*) FROM {}{}").format(sql.Identifier(spec.name),
                                                                          _where(spec))).fetchone()
        return int(row[0]) if row else 0

    def read(self, spec: TableSpec) -> Iterator[list[Row]]:
        vectors = [i for i, kind in enumerate(spec.types) if kind == EMBEDDING]
        query = sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT (FORMAT BINARY)").format(
            _columns(spec), sql.Identifier(spec.name), _where(spec))
        with self.con.cursor() as cursor, cursor.copy(query) as copy:
            copy.set_types(list(spec.types))
            batch: list[Row] = []
            for row in copy.rows():
                if vectors:
                    values = list(row)
                    for i in vectors:
                        values[i] = values[i].to_numpy()
                    row = tuple(values)
                batch.append(row)
                if len(batch) >= spec.batch_rows:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def sequence_position(self, sequence: str) -> int:
        row = self.con.execute(sql.SQL("SELECT last_value, is_called FROM {}").format(
            sql.Identifier(sequence))).fetchone()
        if row is None:
            return 0
        return int(row[0]) if row[1] else int(row[0]) - 1

    # --- writing: one transaction ---

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """The copy's transaction: the schema made anew (dropped first if it is there), then the
        block's writes; all or nothing."""
        with self.con.transaction():
            drop(self.con, self.schema)
            migrate(self.con, self.schema)
            self._use_schema()
            yield

    def clear_meta(self, spec: TableSpec) -> None:
        self.con.execute(sql.SQL("DELETE FROM meta{}").format(_where(spec)))

    def type_embeddings(self, dim: int, dtype: str) -> None:
        """The embedding columns typed ``vector(dim)`` while they are empty, without their HNSW
        indexes until the rows are in (``index_embeddings``)."""
        type_embeddings(self.con, dim, dtype)
        self._drop_vector_indexes()

    def index_embeddings(self, dim: int, dtype: str, most_vectors: int) -> None:
        wanted = min(INDEX_MEMORY_CAP, most_vectors * (dim * 4 + INDEX_BYTES_PER_VECTOR))
        row = self.con.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))").fetchone()
        if row is not None and wanted > int(row[0]):
            self.con.execute("SELECT set_config('maintenance_work_mem', %s, true)", [f"{wanted // (1 << 20) + 1}MB"])
        type_embeddings(self.con, dim, dtype)   # the columns have their type already: only the indexes are built

    def _drop_vector_indexes(self) -> None:
        rows = self.con.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%% hnsw %%'",
                                [self.schema]).fetchall()
        for (name,) in rows:
            self.con.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(self.schema, name)))

    def write(self, spec: TableSpec, batches: Iterable[list[Row]]) -> None:
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(sql.Identifier(spec.name), _columns(spec))
        with self.con.cursor() as cursor, cursor.copy(query) as copy:
            copy.set_types(list(spec.types))
            for rows in batches:
                for row in rows:
                    copy.write_row(row)

    def advance(self, sequence: str, value: int) -> None:
        if value > self.sequence_position(sequence):
            self.con.execute("SELECT setval(%s::regclass, %s)",
                             [sql.Identifier(self.schema, sequence).as_string(self.con), value])

