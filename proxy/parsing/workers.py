"""Parsing in long-lived worker processes, with bounds on time, memory and output size.

A .docx of millions of empty paragraphs, a PDF whose pages share one huge content stream, HTML
nested millions deep: small uploads that cost minutes of CPU and gigabytes of memory to parse.
So :func:`parse_document` runs in a worker process (``python -m proxy.parsing.workers``) that:

- limits its address space (RLIMIT_AS) to its own size at start plus GRAPHGATE_PARSE_MEMORY for
  each document; a document over it fails with "needs more than N MB", and the worker is replaced;
- is killed by the gateway when one document takes more than GRAPHGATE_PARSE_SECONDS (RLIMIT_CPU
  is a backstop should the gateway be gone); the document fails with "took more than N s";
- returns at most GRAPHGATE_MAX_UPLOAD_BYTES characters of text.

The workers are started on first use and reused (a spawn costs a Python start and the parsers'
imports, far more than a document); at most :data:`WORKERS` run, and one knowledge base never
holds all of them (``ParsePool``): its slow documents wait for each other, not the other bases'.
The gateway talks to one over its stdin/stdout in a worker thread, so the event loop never
blocks, and its own memory is untouched.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import anyio.to_thread

from proxy.core import errors
from proxy.core.errors import BadRequest, GraphGateError, PayloadTooLarge
from proxy.core.settings_sections import ParsingSettings
from proxy.parsing.files import ParsedDocument, safe_name

WORKERS = 2
STARTUP_SECONDS = 120   # a new worker's start (a Python start and the parsers' imports) may take this long
_HEADER = struct.Struct("!Q")
_READY = b"R"           # what a worker writes once its imports are done: the parse clock starts after
_MB = 1024 * 1024


# ------------------------------------------------------------------------------ the gateway side

def _write(stream: Any, payload: Any) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    """``size`` bytes from ``fd``; None at end of file; TimeoutError past ``deadline``."""
    parts, left = [], size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            return None
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


class _Worker:
    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "proxy.parsing.workers"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.started = False

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def run(self, request: tuple[Any, ...], seconds: float) -> tuple[Any, ...] | None:
        """The worker's reply, or None when it died; TimeoutError past ``seconds`` of parsing (a new
        worker's start is not the document's time: on a busy machine it alone can take seconds)."""
        if self.process.stdout is None:
            raise RuntimeError("the parse worker was started without a pipe for its replies")
        fd = self.process.stdout.fileno()
        if not self.started:
            try:
                ready = _read_exact(fd, len(_READY), time.monotonic() + STARTUP_SECONDS)
            except TimeoutError:
                ready = None
            if ready != _READY:
                self.process.kill()   # it never got going: the document fails as a stopped parser
                return None
            self.started = True
        try:
            _write(self.process.stdin, request)
        except (BrokenPipeError, OSError):
            return None
        deadline = time.monotonic() + seconds
        header = _read_exact(fd, _HEADER.size, deadline)
        if header is None:
            return None
        body = _read_exact(fd, _HEADER.unpack(header)[0], None)  # the reply is written at once
        return None if body is None else pickle.loads(body)


class ParsePool:
    """At most ``size`` workers, shared fairly by their owners (the knowledge bases): one owner holds
    at most all the workers but one (when there are several), so a document of another base never
    waits behind one base's queue, however slow its documents are; a free worker goes to the waiting
    document whose owner holds the fewest, the earliest first."""

    def __init__(self, size: int = WORKERS) -> None:
        self.size = size
        self.share = max(1, size - 1)   # the most workers one owner may hold at once
        self.idle: list[_Worker] = []
        self.running = 0
        self.held: Counter[str] = Counter()   # workers parsing, by owner
        self.waiting: list[tuple[int, str]] = []   # (ticket, owner) of the documents waiting for a worker
        self._tickets = itertools.count()
        self.ready = threading.Condition()

    def _next(self) -> tuple[int, str] | None:
        """The waiting document served next: its owner below its share, holding the fewest, the earliest."""
        allowed = [entry for entry in self.waiting if self.held[entry[1]] < self.share]
        return min(allowed, key=lambda entry: (self.held[entry[1]], entry[0]), default=None)

    def _take(self, owner: str) -> _Worker:
        with self.ready:
            turn = (next(self._tickets), owner)
            self.waiting.append(turn)
            try:
                while True:
                    while self.idle and self.idle[-1].process.poll() is not None:  # died while idle
                        self.idle.pop().kill()
                        self.running -= 1
                    if (self.idle or self.running < self.size) and self._next() == turn:
                        break
                    self.ready.wait()
            finally:
                self.waiting.remove(turn)
                self.ready.notify_all()   # another may be next now (or was waiting behind this one)
            self.held[owner] += 1
            if self.idle:
                return self.idle.pop()
            self.running += 1
        try:
            return _Worker()
        except BaseException:
            self._give_back(None, owner)
            raise

    def _give_back(self, worker: _Worker | None, owner: str) -> None:
        with self.ready:
            self.held[owner] -= 1
            if not self.held[owner]:
                del self.held[owner]
            if worker is None:
                self.running -= 1
            else:
                self.idle.append(worker)
            self.ready.notify_all()

    def parse(self, name: str, data: bytes, *, max_bytes: int, seconds: float, memory: int,
              max_chars: int, owner: str = "") -> ParsedDocument:
        shown = safe_name(name)
        worker = self._take(owner)
        keep = False
        try:
            try:
                reply = worker.run((name, data, max_bytes, seconds, memory, max_chars), seconds)
            except TimeoutError:
                raise PayloadTooLarge(f"'{shown}' took more than {seconds:g} s to parse "
                                      "(GRAPHGATE_PARSE_SECONDS)") from None
            if reply is None:
                code = worker.process.wait()
                if code == -signal.SIGXCPU:
                    raise PayloadTooLarge(f"'{shown}' took more than {seconds:g} s to parse "
                                          "(GRAPHGATE_PARSE_SECONDS)")
                raise BadRequest(f"could not read '{shown}': the parser stopped unexpectedly (exit code {code})")
            reply, ending = reply
            keep = not ending
            kind = reply[0]
            if kind == "ok":
                return reply[1]
            if kind == "memory":
                raise PayloadTooLarge(f"'{shown}' needs more than {memory // _MB} MB of memory to parse "
                                      "(GRAPHGATE_PARSE_MEMORY)")
            _, class_name, status, message = reply
            cls = getattr(errors, class_name, GraphGateError)
            cls = cls if isinstance(cls, type) and issubclass(cls, GraphGateError) else GraphGateError
            try:
                error = cls(message, status=status)
            except TypeError:  # a subclass with a fixed message
                error = GraphGateError(message, status=status)
            raise error
        finally:
            if keep:
                self._give_back(worker, owner)
            else:
                worker.kill()
                self._give_back(None, owner)

    def close(self) -> None:
        with self.ready:
            idle, self.idle = self.idle, []
            self.running -= len(idle)
        for worker in idle:
            worker.kill()


POOL = ParsePool()
atexit.register(POOL.close)


async def parse_isolated(name: str, data: bytes, settings: ParsingSettings, *, owner: str) -> ParsedDocument:
    """:func:`parse_document` in a worker process, within the settings' bounds; ``owner``: the
    knowledge base it is for (the workers are shared fairly between bases)."""
    return await anyio.to_thread.run_sync(
        lambda: POOL.parse(name, data, max_bytes=settings.max_upload_bytes, seconds=settings.parse_seconds,
                           memory=settings.parse_memory, max_chars=settings.max_upload_bytes, owner=owner))


# ------------------------------------------------------------------------------- the worker side

def _vm_size() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _vm_peak() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _out_of_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError) or "memory allocation failed" in str(exc).lower():
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _serve() -> None:
    import resource

    from proxy.parsing.files import parse_document

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the replies
    stdout.write(_READY)     # imported: the gateway starts a document's clock from here
    stdout.flush()
    base = _vm_size()
    _, hard_as = resource.getrlimit(resource.RLIMIT_AS)
    _, hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the gateway is gone
        name, data, max_bytes, seconds, memory, max_chars = pickle.loads(stdin.read(_HEADER.unpack(header)[0]))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = math.ceil(usage.ru_utime + usage.ru_stime + seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard_cpu == resource.RLIM_INFINITY else min(cpu, hard_cpu),
                                                 hard_cpu))
        limit = base + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard_as == resource.RLIM_INFINITY
                                                else min(limit, hard_as), hard_as))
        reply: tuple[Any, ...]
        try:
            parsed = parse_document(name, data, max_bytes=max_bytes)
            if len(parsed.text) > max_chars:
                raise PayloadTooLarge(f"the text of '{parsed.name}' is {len(parsed.text)} characters, over the "
                                      f"limit of {max_chars} (GRAPHGATE_MAX_UPLOAD_BYTES)")
            reply = ("ok", parsed)
        except BaseException as exc:  # noqa: BLE001 - everything becomes a reply
            parsed = None
            # lxml reports a failed allocation as "unknown error": a failure after the task grew past
            # half its allowance counts as memory (every worker starts a task below that, see below)
            if _out_of_memory(exc) or _vm_peak() > base + memory // 2:
                reply = ("memory",)
            elif isinstance(exc, GraphGateError):
                reply = ("error", type(exc).__name__, exc.status, exc.message)
            else:
                reply = ("error", "BadRequest", 400, f"could not read '{name}': {type(exc).__name__}")
        resource.setrlimit(resource.RLIMIT_AS, (hard_as, hard_as))
        # after a task that grew past half its allowance, the heap may stay large (and VmPeak high):
        # the worker ends, and a fresh one takes the next document
        ending = reply[0] == "memory" or _vm_peak() > base + memory // 2
        _write(stdout, (reply, ending))
        if ending:
            return


if __name__ == "__main__":
    _serve()
