"""Writes of several kinds sharing transactions (the pipeline's uploads, statuses, extractions),
on a real DuckDB database."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from proxy.store.batching import CommitGroup
from proxy.store.tables_duckdb import Con, Database

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "g.duckdb")
    database.con.execute("CREATE TABLE a (v INTEGER PRIMARY KEY)")
    database.con.execute("CREATE TABLE b (v INTEGER PRIMARY KEY)")
    yield database
    database.close()


def rows(db: Database, table: str) -> list[int]:
    return [r[0] for r in db.con.execute(f"SELECT v FROM {table} ORDER BY v").fetchall()]


async def test_items_waiting_together_share_one_transaction_in_writer_order(db: Database) -> None:
    applied: list[tuple[int, str]] = []  # (DuckDB transaction id, what was written)
    group = CommitGroup(db)

    def insert(table: str):
        def apply(con: Con, items: list[int]) -> None:
            applied.append((con.execute("SELECT txid_current()").fetchone()[0], f"{table}{items}"))
            con.executemany(f"INSERT INTO {table} VALUES (?)", [[i] for i in items])
        return apply

    first, second = group.writer(insert("a")), group.writer(insert("b"))
    await db.write_lock.acquire()  # the store is busy (a merge) while the writes arrive
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(group.run)
        waits = [second.submit(1), first.submit(1), first.submit(2), second.submit(2)]
        await anyio.sleep(0.05)
        assert rows(db, "a") == [] and rows(db, "b") == []
        db.write_lock.release()
        for pending in waits:
            await pending.wait()
        tasks.cancel_scope.cancel()
    assert rows(db, "a") == [1, 2] and rows(db, "b") == [1, 2]
    assert [what for _, what in applied] == ["a[1, 2]", "b[1, 2]"]  # the first writer's items first
    assert len({txid for txid, _ in applied}) == 1  # in one transaction


async def test_a_failing_writer_fails_alone(db: Database) -> None:
    group = CommitGroup(db)
    good = group.writer(lambda con, items: con.executemany("INSERT INTO a VALUES (?)", [[i] for i in items]))
    bad = group.writer(lambda con, items: con.execute("INSERT INTO missing_table VALUES (1)"))
    await db.write_lock.acquire()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(group.run)
        ok, broken = good.submit(7), bad.submit(1)
        await anyio.sleep(0.02)
        db.write_lock.release()
        await ok.wait()  # committed on its own after the shared transaction failed
        with pytest.raises(Exception, match="missing_table"):
            await broken.wait()
        tasks.cancel_scope.cancel()
    assert rows(db, "a") == [7]


async def test_shutdown_commits_what_was_handed_over(db: Database) -> None:
    group = CommitGroup(db)
    writer = group.writer(lambda con, items: con.executemany("INSERT INTO b VALUES (?)", [[i] for i in items]))
    await db.write_lock.acquire()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(group.run)
        writer.submit(1)
        await anyio.sleep(0.02)
        writer.submit(2)  # arrives while the first commit waits for the store
        db.write_lock.release()
        tasks.cancel_scope.cancel()
    assert rows(db, "b") == [1, 2]
