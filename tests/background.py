"""The writes GraphGate makes beside a request (a chat's trace, new cache entries: ``write_in_background`` in
``proxy/knowledge/bookkeeping.py``), followed from the moment a request hands one over until it is
committed, so that a test waits for them instead of sleeping a guessed time (which a loaded machine
outlasts).

``install()`` (called by tests/conftest.py) wraps the bookkeeping's write coroutine: each one made is
remembered (weakly) and counts as outstanding until it has finished, failed or been cancelled."""

from __future__ import annotations

import inspect
import threading
import time
import weakref
from collections.abc import Coroutine
from typing import Any

import anyio

from proxy.knowledge import bookkeeping

_original = bookkeeping._quietly
_made: weakref.WeakSet[Coroutine[Any, Any, None]] = weakref.WeakSet()
_lock = threading.Lock()   # servers in threads (tests/live.py) make them too


def _followed(writes: Any, item: Any) -> Coroutine[Any, Any, None]:
    coroutine = _original(writes, item)   # made when the request calls start_soon, before it runs
    with _lock:
        _made.add(coroutine)
    return coroutine


def install() -> None:
    bookkeeping._quietly = _followed


def forget() -> None:
    """A new test starts with nothing outstanding (what an earlier test's app left is not its own)."""
    with _lock:
        _made.clear()


def outstanding() -> int:
    with _lock:
        made = list(_made)
    return sum(1 for coroutine in made if inspect.getcoroutinestate(coroutine) != inspect.CORO_CLOSED)


async def background_written(seconds: float = 30) -> None:
    """Until every trace and cache entry handed to the background so far is committed; ``seconds``
    only ends a wait that would never end."""
    with anyio.fail_after(seconds):
        while outstanding():
            await anyio.sleep(0.005)


def background_written_sync(seconds: float = 30) -> None:
    """``background_written`` for a test whose gateway runs in a thread or over a real socket."""
    deadline = time.monotonic() + seconds
    while outstanding():
        assert time.monotonic() < deadline, f"background writes still outstanding after {seconds:.0f} s"
        time.sleep(0.005)
