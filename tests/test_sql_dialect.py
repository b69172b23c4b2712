"""The dialect layer (proxy/store/sql_dialect.py): a statement written once, with ``?`` marks, runs on
DuckDB and on PostgreSQL with the same answers; a ``?`` or a ``%`` inside a quoted literal stays
text; the idioms that part the engines (membership in a list parameter, list overlap, a text's
size in bytes) answer alike; and a value holding a NUL is refused where the engine's text cannot
hold one."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.store.sql_dialect import Sql

pytestmark = pytest.mark.anyio


async def run(backend: tuple[str, Any], statement: Any, *args: Any) -> Any:
    _, db = backend
    return await db.read(db.dialect.bind(statement), *args)


async def test_marks_are_the_drivers_and_literals_stay_text(backend_db: tuple[str, Any]) -> None:
    def read(sql: Sql) -> Any:
        return sql.execute("SELECT '50% of ?' || ?, ? + 1, 'it''s ?'", ["x", 2]).fetchone()

    assert tuple(await run(backend_db, read)) == ("50% of ?x", 3, "it's ?")


async def test_a_statement_without_parameters_keeps_its_percent_signs(backend_db: tuple[str, Any]) -> None:
    def read(sql: Sql) -> Any:
        return sql.one("SELECT 'a % b' || '%%'")

    assert await run(backend_db, read) == "a % b%%"


async def test_the_idioms_answer_alike(backend_db: tuple[str, Any]) -> None:
    def read(sql: Sql) -> Any:
        among = [r[0] for r in sql.execute(
            f"SELECT v FROM (SELECT unnest(?::text[]) AS v) t WHERE {sql.among('v', 'text')} ORDER BY v",
            [["a", "b", "c"], ["c", "b", "z"]]).fetchall()]
        overlaps = [sql.one(f"SELECT {sql.overlaps('?::text[]', 'text')}", [left, right])
                    for left, right in ((["a", "b"], ["b", "z"]), (["a"], ["z"]))]
        size = sql.one(f"SELECT {sql.byte_length('?::text')}", ["né"])
        return among, overlaps, size

    assert await run(backend_db, read) == (["b", "c"], [True, False], 3)


async def test_many_rows_keep_their_order_in_one_transaction(backend_db: tuple[str, Any]) -> None:
    _, db = backend_db

    def write(sql: Sql) -> list[str]:
        sql.execute("CREATE TEMP TABLE dialect_rows (n integer, word text)")
        sql.executemany("INSERT INTO dialect_rows VALUES (?, ?)", [(i, f"w{i}") for i in range(5)])
        return [r[0] for r in sql.execute("SELECT word FROM dialect_rows ORDER BY n").fetchall()]

    assert await db.write(db.dialect.bind(write)) == ["w0", "w1", "w2", "w3", "w4"]


async def test_a_nul_is_refused_only_where_text_cannot_hold_it(backend_db: tuple[str, Any]) -> None:
    name, db = backend_db
    postgres = name == "postgresql"
    assert db.dialect.unstorable("a\x00b") is postgres and not db.dialect.unstorable("ab", None)
    assert db.dialect.storable("a\x00b") == ("a\ufffdb" if postgres else "a\x00b")
