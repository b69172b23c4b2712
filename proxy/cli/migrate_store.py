"""``graphgate migrate-store --to postgresql://...`` / ``--from postgresql://...``: the knowledge
bases copied between the embedded store at ``--data-dir`` and a PostgreSQL server, with progress per
table, then a table per base (rows, checksum) saying whether the copy matches its source.
Exit status 0 only when every table of every base matches."""

from __future__ import annotations

import anyio.to_thread
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from proxy.cli.commands import CommandError, console
from proxy.core.setting_parsers import parse_store
from proxy.core.settings import Settings
from proxy.knowledge.migrate_store import BaseCopy, MigrationError, from_postgres, to_postgres


async def migrate_store(settings: Settings, to: str | None, source: str | None, kb: str | None,
                        replace: bool) -> int:
    dsn = to or source or ""
    if not dsn.startswith("postgres"):
        raise CommandError(f"{dsn!r} is no PostgreSQL URI: expected one such as "
                           "postgresql://user:password@host:5432/graphgate")
    try:
        parse_store(dsn)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    move = to_postgres if to else from_postgres
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        tasks: dict[str, TaskID] = {}

        def report(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        try:
            copies = await anyio.to_thread.run_sync(lambda: move(settings, dsn, kb, replace, report))
        except MigrationError as exc:
            raise CommandError(str(exc)) from None
    for copy in copies:
        print_copy(copy)
    wrong = [(copy.name, table) for copy in copies for table in copy.mismatched]
    if wrong:
        raise CommandError("the copy does not match its source: " + ", ".join(
            f"table {table} of knowledge base {name!r}" for name, table in wrong))
    console.print(f"{len(copies)} knowledge base(s) copied; every table matches its source")
    return 0


def print_copy(copy: BaseCopy) -> None:
    print(f"{copy.name}: {copy.source} -> {copy.target}")
    print(f"  copied in {copy.copy_seconds:.1f} s, checked in {copy.check_seconds:.1f} s")
    print(f"  {'table':<24}{'rows':>10}  checksum")
    for check in copy.tables:
        rows = str(check.source_rows) if check.source_rows == check.target_rows \
            else f"{check.source_rows} -> {check.target_rows}"
        verdict = "match" if check.ok else "MISMATCH"
        print(f"  {check.table:<24}{rows:>10}  {verdict} {check.target_checksum[:12]}")
