"""Copying one knowledge base's store from one backend to the other (``graphgate migrate-store``),
then holding the copy to the source: per table, the same rows and the same checksum
(``migrate_rows.TableDigest``), the source's digests taken from the very rows copied.

The sides are ``migrate_duckdb.DuckDBSide`` and ``migrate_postgres.PostgresSide``: each reads a
table in batches of rows, and the target writes them in one transaction (all or nothing), then its
sequences are moved past the source's (vector keys are kept: the indexes are rebuilt from them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from proxy.store.migrate_rows import (
    EMBEDDING,
    SEQUENCES,
    TABLES,
    MigrationError,
    Row,
    TableDigest,
    TableSpec,
)

Progress = Callable[[str, int, int], None]   # (what, done, total)
# tables only one backend has: the PostgreSQL change log (a migrated schema starts a fresh one);
# tables not copied: the staged vectors of an unfinished re-embedding (``graphgate reindex`` makes
# them again on the copy)
ENGINE_TABLES = frozenset({"change_log", "reembedding"})
# columns only PostgreSQL has: the ingestion queue's leases (empty after a copy)
ENGINE_COLUMNS = {"documents": frozenset({"lease_owner", "lease_until"})}


class Side(Protocol):
    label: str

    def columns(self) -> dict[str, list[str]]: ...
    def count(self, spec: TableSpec) -> int: ...
    def read(self, spec: TableSpec) -> Iterator[list[Row]]: ...
    def sequence_position(self, sequence: str) -> int: ...


class Target(Side, Protocol):
    builds_indexes: bool   # vector indexes built in the copy's transaction (PostgreSQL), not at start-up

    def writing(self) -> AbstractContextManager[None]: ...
    def clear_meta(self, spec: TableSpec) -> None: ...
    def write(self, spec: TableSpec, batches: Iterable[list[Row]]) -> None: ...
    def advance(self, sequence: str, value: int) -> None: ...
    def type_embeddings(self, dim: int, dtype: str) -> None: ...
    def index_embeddings(self, dim: int, dtype: str, most_vectors: int) -> None: ...


@dataclass(frozen=True)
class TableCheck:
    table: str
    source_rows: int
    target_rows: int
    source_checksum: str
    target_checksum: str

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows and self.source_checksum == self.target_checksum


@dataclass
class BaseCopy:
    """One knowledge base copied: each table's check, and how long the copy and the check took."""

    name: str
    source: str
    target: str
    tables: list[TableCheck] = field(default_factory=list)
    copy_seconds: float = 0.0
    check_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.tables)

    @property
    def mismatched(self) -> list[str]:
        return [check.table for check in self.tables if not check.ok]


def check_tables(side: Side) -> None:
    """Refuse a store whose tables are not the ones this copy knows (a newer or older GraphGate's):
    a column left behind would be lost without a word."""
    found = side.columns()
    known = {spec.name: spec for spec in TABLES}
    unknown = sorted(set(found) - set(known) - ENGINE_TABLES)
    if unknown:
        raise MigrationError(f"{side.label} has tables this GraphGate does not copy: {', '.join(unknown)}")
    for name, spec in known.items():
        columns = set(found.get(name, ()))
        missing = sorted(set(spec.names) - columns)
        extra = sorted(columns - set(spec.names) - ENGINE_COLUMNS.get(name, frozenset()))
        if name not in found or missing or extra:
            raise MigrationError(f"{side.label}: table {name} is not as this GraphGate knows it "
                                 f"(missing {missing or 'nothing'}, unknown {extra or 'nothing'})")


def copy_base(name: str, source: Side, target: Target, progress: Progress, dtype: str = "i8") -> BaseCopy:
    """Copy every table of ``source`` into ``target`` (empty, or made anew by its ``writing``),
    then check the copy. ``dtype``: the vector index's element type on PostgreSQL."""
    check_tables(source)
    try:
        return _copy_and_check(name, source, target, progress, dtype)
    except MigrationError:
        raise
    except Exception as exc:   # the engines' errors (a copy that fails is rolled back): one sentence
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MigrationError(f"copying knowledge base {name!r} into {target.label} failed: {detail}") from exc


def _copy_and_check(name: str, source: Side, target: Target, progress: Progress, dtype: str) -> BaseCopy:
    result = BaseCopy(name, source.label, target.label)
    started = time.monotonic()
    digests: dict[str, TableDigest] = {}
    with target.writing():
        meta_spec = TABLES[0]
        meta_rows = [row for batch in source.read(meta_spec) for row in batch]
        digests["meta"] = TableDigest(meta_spec)
        digests["meta"].add(meta_rows)
        target.clear_meta(meta_spec)
        target.write(meta_spec, [meta_rows])
        meta: dict[str, str] = dict(meta_rows)
        dim = int(meta["embed_dim"]) if meta.get("embed_dim") else 0
        if dim:
            target.type_embeddings(dim, dtype)
        for spec in TABLES[1:]:
            digest = digests[spec.name] = TableDigest(spec)
            total = source.count(spec)
            target.write(spec, _counted(source.read(spec), digest, progress, f"{name}: copying {spec.name}", total))
        for sequence in SEQUENCES:
            highest = max(d.highest for d in digests.values() if d.spec.sequence == sequence)
            target.advance(sequence, max(highest, source.sequence_position(sequence)))
        if dim and target.builds_indexes:
            progress(f"{name}: building the vector indexes", 0, 1)
            most = max(d.rows for d in digests.values() if EMBEDDING in d.spec.types)
            target.index_embeddings(dim, dtype, most)
            progress(f"{name}: building the vector indexes", 1, 1)
    result.copy_seconds = time.monotonic() - started
    started = time.monotonic()
    for spec in TABLES:
        copied = TableDigest(spec)
        total = digests[spec.name].rows
        for _ in _counted(target.read(spec), copied, progress, f"{name}: checking {spec.name}", total):
            pass
        source_digest = digests[spec.name]
        result.tables.append(TableCheck(spec.name, source_digest.rows, copied.rows, source_digest.hexdigest(),
                                        copied.hexdigest()))
    result.check_seconds = time.monotonic() - started
    return result


def _counted(batches: Iterable[list[Row]], digest: TableDigest, progress: Progress, what: str,
             total: int) -> Iterator[list[Row]]:
    """The batches, each added to ``digest`` on its way, with the progress reported."""
    progress(what, 0, total)
    for rows in batches:
        digest.add(rows)
        progress(what, digest.rows, max(total, digest.rows))
        yield rows
