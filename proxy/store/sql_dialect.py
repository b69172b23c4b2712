"""The small dialect layer under the SQL adapters: a statement is written once, in the SQL DuckDB and
PostgreSQL both speak, with ``?`` for its parameters; a ``Dialect`` says the few things that part
them (how the driver marks a parameter, which membership test the planner serves from an index, how
a list's overlap, a text's size in bytes and a vector's dimensions are asked, whether text may hold
a NUL, where executemany lives, whether an UPDATE from a list finds its rows by index), and ``Sql``,
a connection speaking the shared SQL, applies them. The marks are translated by a plain scan: a
``?`` inside a quoted literal stays text, but no statement may use PostgreSQL's ``?`` operators,
dollar quoting or ``E'...'`` strings."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dialect:
    name: str
    placeholder: str        # the driver's parameter mark: "?" (DuckDB) or "%s" (psycopg)
    member_test: str        # "{column}" in a "{type}[]" parameter, the form the engine's planner serves
    overlap_test: str       # list "{column}" shares a value with a "{type}[]" parameter
    byte_length_of: str     # the function answering a text's size in bytes
    dimensions_of: str      # the function answering a stored vector's number of dimensions
    refuses_nul: bool       # PostgreSQL's text cannot hold a NUL character (DuckDB's can)
    many_on_a_cursor: bool  # executemany is a cursor's (psycopg); DuckDB's cursor() is another connection
    # an UPDATE ... FROM a list parameter finds its rows through the table's index (PostgreSQL); else
    # (DuckDB) it scans the whole table, and a statement per row, each served by the index, is cheaper
    updates_join_by_index: bool

    def statement(self, text: str) -> str:
        """``text`` with its ``?`` marks as this driver marks parameters."""
        return text if self.placeholder == "?" else _marked(text, self.placeholder)

    def among(self, column: str, type_: str) -> str:
        """``column`` is one of the values of the array parameter written here (its ``?``)."""
        return self.member_test.format(column=column, type=type_)

    def overlaps(self, column: str, type_: str) -> str:
        """List ``column`` holds one of the values of the array parameter written here."""
        return self.overlap_test.format(column=column, type=type_)

    def byte_length(self, expression: str) -> str:
        return f"{self.byte_length_of}({expression})"

    def dimensions(self, expression: str) -> str:
        return f"{self.dimensions_of}({expression})"

    def unstorable(self, *texts: str | None) -> bool:
        """Whether a searched value holds what this engine's text cannot: it then matches no row
        (as in the engine that can hold it), and must not reach a server that refuses it."""
        return self.refuses_nul and any(text and "\x00" in text for text in texts)

    def storable(self, text: str | None) -> str | None:
        """Free text a client sent (a chat's question, never a key), as this engine's text holds it:
        a NUL character as U+FFFD, the replacement character, where text cannot hold one."""
        return text.replace("\x00", "\ufffd") if text and self.refuses_nul else text

    def bind(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(sql, *args)`` as the backends' connections run a statement: ``fn(connection, *args)``."""
        return functools.partial(_speaking, fn, self)


def containing(text: str) -> str:
    """An ``ILIKE ... ESCAPE '\\'`` pattern matching ``text`` anywhere, its ``%`` ``_`` ``\\`` taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@functools.lru_cache(maxsize=1024)
def _marked(text: str, mark: str) -> str:
    """Each ``?`` outside a quoted literal as ``mark``; a literal ``%`` doubled (psycopg reads ``%``
    as the start of a mark)."""
    parts = text.replace("%", "%%").split("'")
    parts[::2] = [part.replace("?", mark) for part in parts[::2]]   # the even parts are outside quotes
    return "'".join(parts)


def _speaking(fn: Callable[..., Any], dialect: Dialect, con: Any, *args: Any) -> Any:
    return fn(Sql(con, dialect), *args)


class Sql:
    """A backend's connection speaking the shared SQL (see the module's docstring)."""

    __slots__ = ("con", "dialect")

    def __init__(self, con: Any, dialect: Dialect) -> None:
        self.con = con
        self.dialect = dialect

    def execute(self, statement: str, args: Sequence[Any] = ()) -> Any:
        return self.con.execute(self.dialect.statement(statement), list(args))

    def executemany(self, statement: str, rows: list[Sequence[Any]]) -> None:
        if self.dialect.many_on_a_cursor:
            with self.con.cursor() as cursor:
                cursor.executemany(self.dialect.statement(statement), rows)
        else:
            self.con.executemany(self.dialect.statement(statement), rows)

    def one(self, statement: str, args: Sequence[Any] = ()) -> Any:
        """The single value an aggregate query answers."""
        row = self.execute(statement, args).fetchone()
        assert row is not None  # an aggregate always answers one row
        return row[0]

    def among(self, column: str, type_: str) -> str:
        return self.dialect.among(column, type_)

    def overlaps(self, column: str, type_: str) -> str:
        return self.dialect.overlaps(column, type_)

    def byte_length(self, expression: str) -> str:
        return self.dialect.byte_length(expression)

    def dimensions(self, expression: str) -> str:
        return self.dialect.dimensions(expression)

    def unstorable(self, *texts: str | None) -> bool:
        return self.dialect.unstorable(*texts)

    def storable(self, text: str | None) -> str | None:
        return self.dialect.storable(text)
