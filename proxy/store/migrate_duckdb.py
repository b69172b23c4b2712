"""The embedded side of ``graphgate migrate-store``: a knowledge base's DuckDB file read in Arrow
batches, or a fresh one written from them (an Arrow table per batch, inserted by one statement).

The vector indexes and BM25 files beside the database are derived from its tables (rebuilt at
start-up): they are never copied, and a replaced store loses them with its database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from proxy.core.data_dir import DATABASE_FILE
from proxy.store.duckdb.connection import relation_ready
from proxy.store.duckdb.schema import migrate
from proxy.store.migrate_rows import EMBEDDING, MigrationError, Row, TableSpec
from proxy.store.vector_models import VECTOR_TABLES

ARROW_TYPES = {"text": pa.string(), "bigint": pa.int64(), "integer": pa.int32(), "double precision": pa.float64(),
               "boolean": pa.bool_(), "timestamp": pa.timestamp("us"), "text[]": pa.list_(pa.string())}


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _opening_error(path: Path, exc: duckdb.Error) -> MigrationError:
    detail = str(exc).split("Error: ", 1)[-1].splitlines()[0]
    if "lock" in detail.lower():
        return MigrationError(f"the store {path} is open in another process ({detail}): stop `graphgate serve` "
                              "(and any other graphgate command on it) first: migrate-store needs it to itself")
    return MigrationError(f"cannot open the store {path}: {detail}")


def holds_documents(directory: Path) -> bool:
    """Whether the embedded store in ``directory`` has a document (read-only: nothing is changed)."""
    path = directory / DATABASE_FILE
    if not path.is_file():
        return False
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise _opening_error(path, exc) from None
    try:
        exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'documents'").fetchone()
        if not exists or not exists[0]:
            return False
        return con.execute("SELECT EXISTS (SELECT 1 FROM documents)").fetchone() == (True,)
    finally:
        con.close()


def remove_store(directory: Path) -> None:
    """A knowledge base's database, its log and the indexes derived from it (the rest of the
    directory, e.g. default's list of bases and keys, stays)."""
    for name in (DATABASE_FILE, f"{DATABASE_FILE}.wal"):
        (directory / name).unlink(missing_ok=True)
    for table in VECTOR_TABLES:
        for derived in directory.glob(f"{table}.*"):
            if derived.is_dir():
                shutil.rmtree(derived)
            else:
                derived.unlink()


def staged(directory: Path) -> Path:
    """Where a copy into ``directory`` is written before it takes the store's place (``put_in_place``)."""
    return directory / f".{DATABASE_FILE}.migrating"


def put_in_place(directory: Path) -> None:
    """The staged copy (checkpointed and closed) becomes the base's store: the old database and its
    derived indexes go, the copy is renamed over."""
    remove_store(directory)
    log = staged(directory).with_name(staged(directory).name + ".wal")
    if log.exists():   # none after the checkpoint, but a log left there belongs with its database
        os.replace(log, directory / f"{DATABASE_FILE}.wal")
    os.replace(staged(directory), directory / DATABASE_FILE)


def drop_staged(directory: Path) -> None:
    for path in (staged(directory), staged(directory).with_name(staged(directory).name + ".wal")):
        path.unlink(missing_ok=True)


class DuckDBSide:
    """One knowledge base's DuckDB file, opened (and migrated, as the gateway would) for the copy."""

    builds_indexes = False   # the USearch indexes are built from the tables at start-up

    def __init__(self, directory: Path, memory_limit: str = "1GB", file_name: str = DATABASE_FILE) -> None:
        self.path = directory / file_name
        self.label = f"embedded store {directory}"
        directory.mkdir(parents=True, exist_ok=True)
        try:
            self.con = duckdb.connect(str(self.path), config={"memory_limit": memory_limit})
        except duckdb.Error as exc:
            raise _opening_error(self.path, exc) from None
        try:
            migrate(self.con)
        except BaseException:
            self.con.close()
            raise

    def close(self) -> None:
        self.con.close()

    # --- reading ---

    def columns(self) -> dict[str, list[str]]:
        rows = self.con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall()
        found: dict[str, list[str]] = {}
        for table, column in rows:
            found.setdefault(table, []).append(column)
        return found

    def count(self, spec: TableSpec) -> int:
        row = self.con.execute(f"SELECT count(*) FROM {spec.name}{_where(spec)}").fetchone()
        return int(row[0]) if row else 0

    def read(self, spec: TableSpec) -> Iterator[list[Row]]:
        query = f"SELECT {_quoted(spec.names)} FROM {spec.name}{_where(spec)}"
        reader = relation_ready(self.con).sql(query).to_arrow_reader(spec.batch_rows)
        for batch in reader:
            yield _rows(batch, spec)

    def sequence_position(self, sequence: str) -> int:
        """The last value the sequence handed out (0: none)."""
        row = self.con.execute("SELECT last_value FROM duckdb_sequences() WHERE schema_name = 'main' "
                               "AND sequence_name = ?", [sequence]).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # --- writing: one transaction ---

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """The copy's transaction, checkpointed once committed: all or nothing."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")
        self.con.execute("CHECKPOINT")

    def clear_meta(self, spec: TableSpec) -> None:
        """The meta rows the copy brings (the schema's version stays this engine's)."""
        self.con.execute(f"DELETE FROM meta{_where(spec)}")

    def write(self, spec: TableSpec, batches: Iterable[list[Row]]) -> None:
        for rows in batches:
            if not rows:
                continue
            self.con.register("migrated_rows", _arrow(spec, rows))
            try:
                self.con.execute(f"INSERT INTO {spec.name} ({_quoted(spec.names)}) "
                                 f"SELECT {_quoted(spec.names)} FROM migrated_rows")
            finally:
                self.con.unregister("migrated_rows")

    def type_embeddings(self, dim: int, dtype: str) -> None:
        """DuckDB's FLOAT[] takes any dimension: nothing to type."""

    def index_embeddings(self, dim: int, dtype: str, most_vectors: int) -> None:
        """The USearch indexes are built from the tables when the gateway opens the store."""

    def advance(self, sequence: str, value: int) -> None:
        """Make the sequence hand out numbers after ``value``."""
        if value > self.sequence_position(sequence):
            self.con.execute("SELECT setval(?, ?)", [sequence, value])


def _where(spec: TableSpec) -> str:
    return f" WHERE {spec.where}" if spec.where else ""


def _rows(batch: pa.RecordBatch, spec: TableSpec) -> list[Row]:
    columns: list[list[object]] = []
    for i, kind in enumerate(spec.types):
        column = batch.column(i)
        if kind == EMBEDDING:   # one float32 matrix, sliced per row (offsets index the unsliced values)
            offsets = column.offsets.to_numpy()
            values = column.values.to_numpy(zero_copy_only=False)
            columns.append([values[offsets[j]:offsets[j + 1]] for j in range(len(column))])
        else:
            columns.append(column.to_pylist())
    return list(zip(*columns, strict=True))


def _arrow(spec: TableSpec, rows: list[Row]) -> pa.Table:
    arrays = {}
    for i, (name, kind) in enumerate(spec.columns):
        values = [row[i] for row in rows]
        if kind == EMBEDDING:
            lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            flat = np.concatenate([np.asarray(v, dtype=np.float32) for v in values])
            arrays[name] = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa.float32()))
        else:
            arrays[name] = pa.array(values, ARROW_TYPES[kind])
    return pa.table(arrays)
