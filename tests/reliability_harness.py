"""Real-process reliability harness: GraphGate as a real ``python -m proxy serve`` process.

The in-process fixtures of conftest.py cannot be killed; these helpers run GraphGate the way it is
deployed, so a test can SIGKILL it at any moment or SIGTERM it and time the graceful exit, then
open its data directory directly (the process is dead, so nothing holds the DuckDB lock).

    upstream = ScriptedUpstream(names)                # FakeOllama + KnownFacts, served on 127.0.0.1
    with upstream.serve():
        gateway = Gateway(data_dir, upstream.url, log_path=tmp_path / "gateway.log").start()
        ...                                           # httpx against gateway.url
        gateway.kill()                                # SIGKILL; or gateway.terminate() -> (code, seconds)
        state = read_state(snapshot(data_dir, tmp_path / "copy"))

Used by tests/test_kill_loop.py and tests/test_sigterm.py; tests/test_crash_recovery.py predates it.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx

from proxy.parsing.chunking import chunk_id
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, Recorded
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]

# Small chunks (several per document), no gleaning (one extraction call per chunk), frequent
# index saves (so kills also land inside a save), quiet logs.
BASE_ENV = {
    "TIKTOKEN_CACHE_DIR": "",
    "GRAPHGATE_GLEANING": "0",
    "GRAPHGATE_CHUNK_TOKENS": "64",
    "GRAPHGATE_CHUNK_OVERLAP": "0",
    "GRAPHGATE_LOG_LEVEL": "warning",
    "GRAPHGATE_INDEX_SAVE_SECONDS": "0.5",
}
GRACEFUL_EXIT_CODES = (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a graceful shutdown
NAMES = ["Alfa", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliett", "Kilo",
         "Lima", "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango", "Uniform", "Victor",
         "Whiskey", "Xray", "Yankee", "Zulu"]


def document(index: int) -> tuple[str, str]:
    """(name, text) of a test document of 3-4 chunks at 64 tokens; each sentence names one or two
    of ``NAMES``, so ``ScriptedUpstream`` extracts entities and relations from it."""
    rng = random.Random(f"doc{index}")
    paragraphs = []
    for p in range(6):
        a, b, c = rng.sample(NAMES, 3)
        line = f"{a} met {b} in chapter {index}.{p} to talk about topic {rng.randint(0, 999)}."
        if rng.random() < 0.5:
            line += f" {c} worked alone on task {rng.randint(0, 999)}."
        paragraphs.append(f"# Section {p}\n\n{line}")
    return f"doc{index:03d}.md", "\n\n".join(paragraphs)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Gateway:
    """One GraphGate server process on ``data_dir``; its stdout and stderr go to ``log_path``."""

    def __init__(self, data_dir: Path, upstream: str, *, log_path: Path | None = None,
                 env: dict[str, str] | None = None, ready_timeout: float = 60, cwd: Path = ROOT) -> None:
        self.data_dir = data_dir
        self.cwd = cwd
        self.upstream = upstream
        self.log_path = log_path or data_dir.parent / "gateway.log"
        self.extra_env = env or {}
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.url = ""
        self.started_at = 0.0
        self.ready_seconds = 0.0
        self.ports_at_death: set[int] = set()

    # --- lifecycle ---

    def start(self) -> Gateway:
        for _attempt in range(3):  # another process may take the free port before the child binds it
            if self._start_once():
                return self
            if "address already in use" not in self.log_tail().lower():
                break
        raise AssertionError(f"graphgate did not start:\n{self.log_tail()}")

    def _start_once(self) -> bool:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **BASE_ENV, "GRAPHGATE_UPSTREAM": self.upstream, "GRAPHGATE_PORT": str(self.port),
               "GRAPHGATE_DATA_DIR": str(self.data_dir), "PYTHONPATH": str(ROOT), **self.extra_env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')} port {self.port}\n".encode())
            log.flush()
            self.started_at = time.monotonic()
            self.process = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=env, cwd=self.cwd,
                                            stdout=log, stderr=subprocess.STDOUT)
        deadline = self.started_at + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if httpx.get(self.url + "/rag/stats", headers=self.auth, timeout=1).status_code == 200:
                    self.ready_seconds = time.monotonic() - self.started_at
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"graphgate did not answer within {self.ready_timeout} s:\n{self.log_tail()}")

    @property
    def auth(self) -> dict[str, str]:
        """The API key header, when the process has one."""
        key = self.extra_env.get("GRAPHGATE_API_KEY")
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("graphgate was not started")
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed. The process is stopped first, long enough to
        list the local ports of its open TCP connections (``ports_at_death``): a request it sent just
        before dying may reach the upstream's log after the kill, and belongs to this life, not the next."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            _wait_stopped(self.process.pid)
            self.ports_at_death = _open_tcp_ports(self.process.pid)
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout: float = 30) -> tuple[int, float]:
        """SIGTERM and wait: (exit code, seconds from the signal to the exit)."""
        assert self.process is not None and self.alive
        sent = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"graphgate ignored SIGTERM for {timeout} s:\n{self.log_tail()}") from None
        return code, time.monotonic() - sent

    def __enter__(self) -> Gateway:
        return self if self.alive else self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    # --- what it said ---

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_errors(self) -> list[str]:
        """Tracebacks and ERROR lines in the log (warnings about documents are expected)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]

    # --- the API ---

    def upload(self, *indexes: int) -> set[str]:
        """Upload the harness documents of these indexes (JSON, one request each); their ids."""
        ids = set()
        for i in indexes:
            name, text = document(i)
            response = httpx.post(self.url + "/rag/documents", json={"name": name, "text": text}, timeout=30)
            assert response.status_code == 202, response.text
            ids.add(response.json()["documents"][0]["id"])
        return ids

    def documents(self, status: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": 1000}
        if status:
            params["status"] = status
        return httpx.get(self.url + "/rag/documents", params=params, timeout=10).json()["documents"]

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/rag/stats", timeout=10).json()

    def entity(self, name: str) -> dict[str, Any] | None:
        response = httpx.get(f"{self.url}/rag/entities/{name}", timeout=10)
        return response.json() if response.status_code == 200 else None

    def check_live_stats(self) -> dict[str, Any]:
        """The running process's three engines agree in their counts."""
        stats = self.stats()
        assert stats["index_sizes"] == {"chunks": stats["chunks"], "entities": stats["entities"],
                                        "relations": stats["relations"]}, stats
        assert stats["graph"] == {"vertices": stats["entities"], "edges": stats["relations"]}, stats
        return stats

    def wait_processed(self, expected: set[str], timeout: float = 120) -> list[dict[str, Any]]:
        """Wait until exactly the documents ``expected`` exist and all are processed (none failed)."""
        def done() -> list[dict[str, Any]] | None:
            documents = self.documents()
            failed = [d for d in documents if d["status"] == "failed"]
            assert not failed, f"documents failed: {failed}\n{self.log_tail()}"
            if {d["id"] for d in documents} == expected and all(d["status"] == "processed" for d in documents):
                return documents
            return None
        return wait_until(done, timeout, "every document processed", interval=0.1)


# --- the scripted upstream ---

def passage_chunk_id(request: Recorded) -> str | None:
    """The chunk an extraction request is about (None for any other request)."""
    if request.path != "/api/chat" or not isinstance(request.json, dict):
        return None
    schema = request.json.get("format")
    if not isinstance(schema, dict) or "entities" not in (schema.get("properties") or {}):
        return None
    user = request.json["messages"][-1].get("content", "")
    match = re.search(r"<<<\n(.*)\n>>>", user, re.S)
    return chunk_id(match.group(1)) if match else None


def client_port(request: Recorded) -> int:
    """The local port of the connection a request came on (0 when unknown)."""
    port = request.client.rpartition(":")[2]
    return int(port) if port.isdigit() else 0


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Until every thread of a SIGSTOPped process is stopped (state T), so it opens nothing more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):  # a thread may end meanwhile
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        if states and all(state in ("T", "t", "Z", "X") for state in states):
            return
        time.sleep(0.001)


def _open_tcp_ports(pid: int) -> set[int]:
    """The local ports of the TCP connections ``pid`` holds (not its listening sockets): its descriptors'
    socket inodes looked up in the kernel's socket tables."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()  # sl local_address rem_address st ... uid timeout inode
                if len(fields) > 9 and fields[9] in inodes and fields[3] != "0A":  # 0A: listening
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class ScriptedUpstream:
    """FakeOllama answering extraction like a perfect model on the declared ``names`` (name -> type;
    by default every one of ``NAMES`` is a Person)."""

    def __init__(self, names: dict[str, str] | None = None, *, reply_delay: float = 0.1) -> None:
        self.fake = FakeOllama()
        self.facts = KnownFacts(dict(names) if names is not None else {n: "Person" for n in NAMES})
        self.fake.structured = self.facts
        self.fake.reply_delay = reply_delay
        self.url = ""

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        with self.fake.serve() as url:
            self.url = url
            yield url

    @property
    def mark(self) -> int:
        """A position in the request log (take it while no gateway is running to split lifetimes)."""
        return len(self.fake.requests)

    def extractions(self, start: int = 0, end: int | None = None,
                    not_from: Collection[int] = ()) -> list[tuple[int, str]]:
        """(request index, chunk id) of every extraction request in ``[start, end)``, less those that
        came on a connection from one of the local ports ``not_from`` (a dead process's)."""
        requests = self.fake.requests[start:end]
        return [(start + i, c) for i, r in enumerate(requests)
                if (c := passage_chunk_id(r)) is not None and client_port(r) not in not_from]

    def extraction_counts(self, start: int = 0, end: int | None = None,
                          not_from: Collection[int] = ()) -> Counter[str]:
        return Counter(c for _, c in self.extractions(start, end, not_from))

    def count(self, path: str, start: int = 0) -> int:
        return sum(1 for r in self.fake.requests[start:] if r.path == path)


# --- the data directory, read while no process holds it ---

def snapshot(data_dir: Path, dest: Path) -> Path:
    """Copy a dead process's data directory (DuckDB file, WAL, index files) to ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(data_dir, dest)
    return dest


@dataclass
class StoreState:
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> name, status, totals
    links: dict[str, list[str]] = field(default_factory=dict)           # document id -> chunk ids in order
    chunks: set[str] = field(default_factory=set)
    extracted: set[str] = field(default_factory=set)                    # chunk ids with a stored extraction
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)   # name_key -> name, type, sources
    relations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # sorted keys -> weight, sources
    aliases: dict[str, str] = field(default_factory=dict)
    entity_edits: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicate_document_ids: list[str] = field(default_factory=list)

    def status_counts(self) -> Counter[str]:
        return Counter(d["status"] for d in self.documents.values())


def read_state(data_dir: Path) -> StoreState:
    """Everything the reliability checks compare, straight from DuckDB (read-only)."""
    con = duckdb.connect(str(data_dir / "graphgate.duckdb"), read_only=True)
    try:
        state = StoreState()
        for id_, name, status, total, done in con.execute(
                "SELECT id, name, status, chunks_total, chunks_done FROM documents").fetchall():
            state.documents[id_] = {"name": name, "status": status, "total": total, "done": done}
        state.duplicate_document_ids = [r[0] for r in con.execute(
            "SELECT id FROM documents GROUP BY id HAVING count(*) > 1").fetchall()]
        for document_id, chunk, _ in con.execute(
                "SELECT document_id, chunk_id, ord FROM document_chunks ORDER BY document_id, ord").fetchall():
            state.links.setdefault(document_id, []).append(chunk)
        state.chunks = {r[0] for r in con.execute("SELECT id FROM chunks").fetchall()}
        state.extracted = {r[0] for r in con.execute("SELECT chunk_id FROM extractions").fetchall()}
        for key, name, type_, sources in con.execute(
                "SELECT name_key, name, type, source_ids FROM entities").fetchall():
            state.entities[key] = {"name": name, "type": type_, "sources": list(sources)}
        for a, b, weight, sources in con.execute("SELECT source, target, weight, source_ids FROM relations").fetchall():
            state.relations[(min(a, b), max(a, b))] = {"weight": weight, "sources": sorted(sources)}
        state.aliases = dict(con.execute("SELECT alias_key, target_key FROM aliases").fetchall())
        for key, name, type_, description in con.execute(
                "SELECT name_key, name, type, description FROM entity_edits").fetchall():
            state.entity_edits[key] = {"name": name, "type": type_, "description": description}
        return state
    finally:
        con.close()


def saved_generations(data_dir: Path) -> set[str]:
    """The store generation each saved vector index says it reflects."""
    return {(data_dir / f"{t}.gen").read_text().split()[0] for t in ("chunks", "entities", "relations")
            if (data_dir / f"{t}.gen").exists()}
