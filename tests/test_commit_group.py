"""Writes of several kinds sharing transactions (the pipeline's uploads, statuses, extractions),
on a real DuckDB database."""

from __future__ import annotations

from collections.abc import Callable, Set
from pathlib import Path

import anyio
import pytest

from proxy.store.batching import CommitGroup
from proxy.store.duckdb.connection import Con, Database

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "g.duckdb")
    database.con.execute("CREATE TABLE a (v INTEGER PRIMARY KEY)")
    database.con.execute("CREATE TABLE b (v INTEGER PRIMARY KEY)")
    yield database
    database.close()


def insert_into(table: str) -> Callable[[Con, list[int]], None]:
    def apply(con: Con, items: list[int]) -> None:
        con.executemany(f"INSERT INTO {table} VALUES (?)", [[i] for i in items])
    return apply


def rows(db: Database, table: str) -> list[int]:
    return [r[0] for r in db.con.execute(f"SELECT v FROM {table} ORDER BY v").fetchall()]


async def test_items_waiting_together_share_one_transaction_in_writer_order(db: Database) -> None:
    applied: list[tuple[int, str]] = []  # (DuckDB transaction id, what was written)
    group = CommitGroup(db)

    def insert(table: str):
        def apply(con: Con, items: list[int]) -> None:
            (row,) = con.execute("SELECT txid_current()").fetchall()  # one row
            applied.append((row[0], f"{table}{items}"))
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
    good = group.writer(insert_into("a"))

    def insert_into_a_missing_table(con: Con, items: list[int]) -> None:
        con.execute("INSERT INTO missing_table VALUES (1)")

    bad = group.writer(insert_into_a_missing_table)
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
    writer = group.writer(insert_into("b"))
    await db.write_lock.acquire()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(group.run)
        writer.submit(1)
        await anyio.sleep(0.02)
        writer.submit(2)  # arrives while the first commit waits for the store
        db.write_lock.release()
        tasks.cancel_scope.cancel()
    assert rows(db, "b") == [1, 2]


def lookup_values(calls: list[list[int]], fail: Set[int] = frozenset()):
    """A read of table a that records each query's keys and fails when asked for one in ``fail``."""
    def read(con: Con, keys: list[int]) -> dict[int, int]:
        calls.append(sorted(keys))
        if fail & set(keys):
            raise RuntimeError("the store refused the read")
        found = con.execute("SELECT v FROM a WHERE v IN (SELECT unnest(?::INTEGER[]))", [keys]).fetchall()
        return {v: v * 10 for (v,) in found}
    return read


async def test_reads_asked_for_together_share_one_query(db: Database) -> None:
    from proxy.store.batching import BatchedReader

    db.con.execute("INSERT INTO a VALUES (1), (2), (3)")
    calls: list[list[int]] = []
    reader = BatchedReader(db, lookup_values(calls))
    results: dict[int, int | None] = {}

    async def get(key: int) -> None:
        results[key] = await reader.get(key)

    async with anyio.create_task_group() as group:
        for key in (1, 2, 3, 4, 2):
            group.start_soon(get, key)
    assert results == {1: 10, 2: 20, 3: 30, 4: None}  # 4 is not stored
    assert calls == [[1, 2, 3, 4]]                     # one query; the key asked twice, once
    assert await reader.get(3) == 30                   # a later lookup makes a round of its own
    assert calls[1:] == [[3]]


async def test_a_failed_read_reaches_every_caller_of_its_round_and_the_next_round_reads_again(db: Database) -> None:
    from proxy.store.batching import BatchedReader

    db.con.execute("INSERT INTO a VALUES (1), (2)")
    calls: list[list[int]] = []
    reader = BatchedReader(db, lookup_values(calls, fail={9}))
    errors: list[str] = []

    async def get(key: int) -> None:
        try:
            await reader.get(key)
        except RuntimeError as exc:
            errors.append(f"{key}: {exc}")

    async with anyio.create_task_group() as group:
        for key in (1, 9):
            group.start_soon(get, key)
    assert sorted(errors) == ["1: the store refused the read", "9: the store refused the read"]
    assert await reader.get(2) == 20


async def test_a_cancelled_first_caller_still_reads_for_the_others(db: Database) -> None:
    from proxy.store.batching import BatchedReader

    db.con.execute("INSERT INTO a VALUES (1), (2)")
    calls: list[list[int]] = []
    reader = BatchedReader(db, lookup_values(calls))
    got: list[int | None] = []

    async def other() -> None:
        got.append(await reader.get(2))

    with anyio.fail_after(10):  # an unshielded first caller would leave the other waiting for ever
        async with anyio.create_task_group() as group:
            with anyio.CancelScope() as leader_scope:
                leader_scope.cancel()  # cancelled before it even starts to read
                group.start_soon(other)
                with pytest.raises(anyio.get_cancelled_exc_class()):
                    await reader.get(1)
    assert got == [20] and calls == [[1, 2]]


async def test_a_checkpoint_empties_the_log_between_reads_and_writes(tmp_path: Path) -> None:
    db = Database(tmp_path / "c.duckdb")
    wal = tmp_path / "c.duckdb.wal"
    await db.write(lambda con: con.execute("CREATE TABLE t AS SELECT range AS v FROM range(50000)"))
    assert wal.exists() and wal.stat().st_size > 0
    assert await db.read(lambda con: con.execute("SELECT v FROM t ORDER BY v").fetchone()) == (0,)  # left open
    rows = await db.read(lambda con: next(iter(con.sql("SELECT v FROM t ORDER BY v").to_arrow_reader(10))).num_rows)
    assert rows == 10  # a streamed read abandoned after one batch
    await db.checkpoint()
    assert not wal.exists() or wal.stat().st_size == 0
    await db.write(lambda con: con.execute("INSERT INTO t VALUES (-1)"))
    assert await db.read(lambda con: con.execute("SELECT count(*) FROM t").fetchone()) == (50001,)
    db.close()
