"""A new database file appears whole or not at all.

DuckDB creates its file first and writes its headers after: on a full disk (or a kill in between)
that left a 0-byte ``graphgate.duckdb`` which DuckDB then refused for ever ("not a valid DuckDB
database file"), space freed or not. So a database is made under a temporary name, its tables
created and checkpointed, fsynced, and only then linked into place (``os.link`` never replaces:
if another process put one there meanwhile, that one is used). A failed or killed creation leaves
only a temporary file, removed by the next creation.

A 0-byte file at the database's place is what such a failed creation left (older versions made
the file in place): nothing was ever written in it, so it is taken away and the database made
again. Any other file there is a database (or the operator's to repair) and is never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb

from proxy.core.durable import fsync_directory

log = logging.getLogger("graphgate.store")

CREATING = ".creating"   # a database being made: ``.<name>.<random>.creating``
EMPTY = ".empty"         # a 0-byte file moved off the database's place, judged there
ORPHANED = ".orphaned"   # a log found without its database: kept aside, never deleted
STALE_SECONDS = 600      # a creation takes milliseconds: a temporary file this old was left by a kill


def wal_of(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def ensure_database(path: Path, config: Mapping[str, Any],
                    prepare: Callable[[duckdb.DuckDBPyConnection], object]) -> None:
    """Make the database at ``path`` (tables by ``prepare``) unless there is one; blocking."""
    if _is_present(path):
        return
    _set_log_aside(path)
    _remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}{CREATING}")
    try:
        con = duckdb.connect(str(temporary), config=dict(config))
        try:
            prepare(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        if wal_of(temporary).exists():   # the close's checkpoint did not finish: not a whole database
            raise OSError(f"the new database {path.name} could not be written whole")
        _fsync(temporary)
        try:
            os.link(temporary, path)
        except FileExistsError:
            log.info("another process made %s meanwhile: using it", path)
        fsync_directory(path.parent)
        log.info("created the knowledge store's database %s", path)
    finally:
        for leftover in (temporary, wal_of(temporary)):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)


def _is_present(path: Path) -> bool:
    """Whether a database (or anything but a 0-byte file) is at ``path``; a 0-byte file is taken off."""
    try:
        if path.stat().st_size > 0:
            return True
    except FileNotFoundError:
        return False
    # moved off first, then judged: a database another process linked into place meanwhile is put back
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex}{EMPTY}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if aside.stat().st_size == 0:
        log.warning("%s was empty (a creation that never finished, e.g. on a full disk): making it again", path)
        aside.unlink()
        return False
    try:
        os.link(aside, path)
    except FileExistsError:
        log.error("%s was replaced while it was checked; the file that was there is kept as %s", path, aside)
        return True
    aside.unlink()
    return True


def _set_log_aside(path: Path) -> None:
    """A write-ahead log with no database beside it cannot be replayed into a new one (DuckDB refuses
    a log of another file): an empty one is removed, anything else kept aside, with a warning."""
    wal = wal_of(path)
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        wal.unlink(missing_ok=True)
        return
    aside = wal.with_name(f"{wal.name}.{int(time.time())}{ORPHANED}")
    os.rename(wal, aside)
    log.warning("%s had no database beside it; it is kept as %s", wal, aside)


def _remove_stale_temporaries(path: Path) -> None:
    """What killed creations left (never a creation under way: those are younger)."""
    now = time.time()
    for leftover in path.parent.glob(f".{path.name}.*{CREATING}*"):
        with contextlib.suppress(OSError):
            if now - leftover.stat().st_mtime > STALE_SECONDS:
                leftover.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
