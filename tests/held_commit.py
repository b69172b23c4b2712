"""A merge commit held open inside the store's own worker thread: first its database transaction, then
its vector-index inserts. ``tests/test_event_loop.py`` checks that the gateway answers while each phase
is held (it releases the phase itself once it has its answers); ``bench/event_loop.py`` lets each phase
run for a fixed time and measures how long the answers took meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from proxy.store import vectors_usearch
from proxy.store.duckdb import tables as duckdb_tables

PHASES = ("transaction", "vector inserts")


class HeldCommit:
    """Once ``armed``, the next commit waits in each phase until ``release[phase]`` is set or
    ``hold_seconds`` pass; ``phase`` says which one is being held right now.

    ``upstream_lines`` is read as a phase begins (``lines_before``): the number of lines the upstream
    had handed out of a stream by then, so that a later line that reaches a client has passed through
    the gateway while the phase was held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, hold_seconds: float,
                 upstream_lines: Callable[[], int] = lambda: 0) -> None:
        self.armed = False
        self.hold_seconds = hold_seconds
        self.phase: str | None = None
        self.phases_seen: list[str] = []
        self.entered = {phase: threading.Event() for phase in PHASES}
        self.release = {phase: threading.Event() for phase in PHASES}
        self.released_early: dict[str, bool] = {}   # released by ``release`` rather than by the clock
        self.lines_before: dict[str, int] = {}
        self._upstream_lines = upstream_lines
        write_changes = duckdb_tables.write_changes
        add = vectors_usearch.VectorIndex.add

        def slow_write(con, changes):
            result = write_changes(con, changes)
            if self.armed:
                self._hold("transaction")
            return result

        def slow_add(index, keys, vectors):
            add(index, keys, vectors)
            if self.armed and "transaction" in self.phases_seen and "vector inserts" not in self.phases_seen:
                self._hold("vector inserts")

        monkeypatch.setattr(duckdb_tables, "write_changes", slow_write)
        monkeypatch.setattr(vectors_usearch.VectorIndex, "add", slow_add)

    def _hold(self, phase: str) -> None:
        self.lines_before[phase] = self._upstream_lines()
        self.phase = phase
        self.phases_seen.append(phase)
        self.entered[phase].set()
        self.released_early[phase] = self.release[phase].wait(self.hold_seconds)
        self.phase = None
