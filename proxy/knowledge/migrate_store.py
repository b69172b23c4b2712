"""``graphgate migrate-store``: every knowledge base of an embedded store (``default`` and the bases
of its list, ``kbs/registry.json``) copied into a PostgreSQL server, a schema ``kb_<name>`` each, or
back from the server's schemas into an embedded store, whose list then names the bases it made.

Nothing is written while anything refuses: a target that already holds documents (unless
``replace``: then its schema, or its database and indexes, are made anew), a store another process
holds open, a server that cannot be reached. Each base is then copied in one transaction and
checked table by table (``proxy/store/migrate.py``). The gateway must not run on either store.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxy.core.data_dir import has_store
from proxy.core.durable import write_json
from proxy.core.errors import GraphGateError
from proxy.core.settings import Settings
from proxy.knowledge.bases import (
    BASES_DIR,
    DEFAULT,
    NAME,
    REGISTRY_FILE,
    base_settings_sync,
    check_name,
    read_registry_sync,
)
from proxy.store.backends import schema_name
from proxy.store.migrate import BaseCopy, Progress, check_tables, copy_base
from proxy.store.migrate_duckdb import DuckDBSide, drop_staged, holds_documents, put_in_place, staged
from proxy.store.migrate_rows import MigrationError

__all__ = ["BaseCopy", "MigrationError", "from_postgres", "to_postgres"]


def _quiet(what: str, done: int, total: int) -> None:
    return None


def _postgres() -> Any:
    """The PostgreSQL side, with psycopg (the ``postgresql`` extra)."""
    try:
        from proxy.store import migrate_postgres
    except ImportError as exc:
        raise MigrationError(f"the PostgreSQL client is not installed ({exc}): install graphgate[postgresql]") \
            from None
    return migrate_postgres


def _embedded_bases(settings: Settings, kb: str | None) -> list[tuple[str, Settings]]:
    """The bases of the embedded store at ``settings.data_dir`` that have a store, each with the
    settings it opens with (its directory, its element type)."""
    try:
        names = [kb] if kb else [DEFAULT, *sorted(read_registry_sync(settings.data_dir / BASES_DIR)[0])]
        # the data directory's own list, whatever GRAPHGATE_STORE names (the compose runs --to "$GRAPHGATE_STORE")
        embedded = settings.replace(store="embedded")
        bases = [(name, base_settings_sync(embedded, name)) for name in names]
    except GraphGateError as exc:
        raise MigrationError(exc.message) from None
    except (OSError, ValueError) as exc:
        raise MigrationError(f"the list of knowledge bases in {settings.data_dir / BASES_DIR} cannot be read: "
                             f"{exc}") from None
    found = [(name, base) for name, base in bases if has_store(base.data_dir)]
    if not found:
        raise MigrationError(f"there is no knowledge store at {settings.data_dir}" + (f" for base {kb!r}" if kb else "")
                             + ": nothing to copy; give --data-dir (GRAPHGATE_DATA_DIR) if it is elsewhere")
    return found


def to_postgres(settings: Settings, dsn: str, kb: str | None = None, replace: bool = False,
                progress: Progress = _quiet) -> list[BaseCopy]:
    """Copy the embedded store's bases (or ``kb``) into the server at ``dsn``."""
    pg = _postgres()
    bases = _embedded_bases(settings, kb)
    server = pg.connect(dsn)
    try:
        occupied = [schema_name(name) for name, _ in bases if pg.holds_documents(server, schema_name(name))]
    finally:
        server.close()
    if occupied and not replace:
        raise MigrationError(f"the PostgreSQL server already holds documents in {', '.join(occupied)}: nothing was "
                             "copied; add --replace to drop and recreate those schemas")
    results = []
    with contextlib.ExitStack() as stack:
        # every store opened first: one that another process holds stops the migration before any write
        sources = [(name, base, stack.enter_context(contextlib.closing(DuckDBSide(base.data_dir, base.db_memory))))
                   for name, base in bases]
        for _, _, source in sources:
            check_tables(source)
        for name, base, source in sources:
            target = pg.PostgresSide(dsn, schema_name(name), source=False)
            try:
                results.append(copy_base(name, source, target, progress, base.vector_dtype))
            finally:
                target.close()
    return results


def from_postgres(settings: Settings, dsn: str, kb: str | None = None, replace: bool = False,
                  progress: Progress = _quiet) -> list[BaseCopy]:
    """Copy the server's bases (or ``kb``) into the embedded store at ``settings.data_dir``; the
    list of bases names every base copied (entries already there are kept as they are)."""
    pg = _postgres()
    server = pg.connect(dsn)
    try:
        names = [schema[3:] for schema in pg.knowledge_schemas(server) if NAME.fullmatch(schema[3:])]
    finally:
        server.close()
    if kb:
        try:
            check_name(kb)
        except GraphGateError as exc:
            raise MigrationError(exc.message) from None
        if kb not in names:
            raise MigrationError(f"no knowledge base named {kb!r} on the server (no schema {schema_name(kb)})")
        names = [kb]
    if not names:
        raise MigrationError(f"the server at {pg.shown(dsn)} holds no knowledge base (no kb_<name> schema)")
    directories = {name: _directory(settings, name) for name in names}
    occupied = [name for name in names if holds_documents(directories[name])]
    if occupied and not replace:
        raise MigrationError(f"the embedded store at {settings.data_dir} already holds documents in "
                             f"{', '.join(occupied)}: nothing was copied; add --replace to replace those bases")
    results = []
    with contextlib.ExitStack() as stack:
        # every schema opened and checked first: one this GraphGate cannot copy stops it before any write
        sources = {name: stack.enter_context(contextlib.closing(pg.PostgresSide(dsn, schema_name(name), source=True)))
                   for name in names}
        for source in sources.values():
            check_tables(source)
        _list_bases(settings.data_dir / BASES_DIR, [name for name in names if name != DEFAULT])
        for name, source in sources.items():
            # written beside the base's store, which it replaces once complete: a copy that fails
            # leaves the base as it was
            directory = directories[name]
            drop_staged(directory)
            target = DuckDBSide(directory, settings.db_memory, staged(directory).name)
            try:
                with source.snapshot():
                    results.append(copy_base(name, source, target, progress))
            except BaseException:
                target.close()
                drop_staged(directory)
                raise
            target.close()
            put_in_place(directory)
    return results


def _directory(settings: Settings, name: str) -> Path:
    return settings.data_dir if name == DEFAULT else settings.data_dir / BASES_DIR / name


def _list_bases(root: Path, names: list[str]) -> None:
    """Add the bases not yet in the list to it (as ``POST /rag/kbs`` does: listed first, then made;
    no settings of their own). The list is written whole."""
    try:
        entries, default_created_at, _ = read_registry_sync(root)
    except (OSError, ValueError) as exc:
        raise MigrationError(f"the list of knowledge bases {root / REGISTRY_FILE} cannot be read: {exc}; "
                             "repair or move it away first") from None
    missing = [name for name in names if name not in entries]
    if not missing:
        return
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for name in missing:
        entries[name] = {"uid": uuid.uuid4().hex[:12], "created_at": now, "settings": {}}
    write_json(root / REGISTRY_FILE, {"version": 1, "default_created_at": default_created_at or now,
                                      "bases": {name: entries[name] for name in sorted(entries)}})

