"""What a newcomer meets at the command line (issue 30, items 3, 4 and 5), with real ``graphgate``
processes (``python -m proxy``, as the entry point runs it):

- ``GRAPHGATE_STORE=postgresql://...`` on an installation without the ``postgresql`` extra: one
  sentence naming ``pip install 'graphgate[postgresql]'``, a non-zero exit (a ModuleNotFoundError
  traceback from the lifespan before). The extra's absence is made real for the child process by a
  ``sitecustomize`` that makes ``import psycopg`` fail; GraphGate itself is not touched.
- a second ``graphgate serve``: on a store in use, "GraphGate is already running on <address> with
  this store" (or which other command holds it), on a port in use, who has it; exit 1, and nothing
  starts (before: DuckDB's lock error, "Application startup complete", "address already in use").
- ``graphgate --version``; ``graphgate status`` as a few lines for a person (``--json`` kept).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.corpus import CITY, CLUB, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.servers import Server, free_port

ROOT = Path(__file__).resolve().parents[1]
NO_POSTGRESQL_CLIENT = '''
import sys


class NoPostgresqlClient:
    """This interpreter behaves as an installation without the postgresql extra."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool", "pgvector"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPostgresqlClient())
'''


@pytest.fixture
def upstream(fake: FakeOllama) -> Iterator[str]:
    fake.structured = KnownFacts(PEOPLE)
    with fake.serve() as url:
        yield url


def environment(tmp_path: Path, upstream: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHGATE_")}
    env.update({"TIKTOKEN_CACHE_DIR": "", "PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "xdg"),
                "GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(tmp_path / "data"),
                "GRAPHGATE_PORT": str(free_port()), "GRAPHGATE_GLEANING": "0", **extra})
    return env


def graphgate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


def one_sentence(result: subprocess.CompletedProcess[str]) -> str:
    """The command's whole output: one line on stderr, nothing on stdout, no traceback."""
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- item 3: the postgresql extra ---------------------------------------------------------------


def test_a_postgresql_store_without_its_client_is_one_sentence(tmp_path: Path, upstream: str) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_POSTGRESQL_CLIENT)
    env = environment(tmp_path, upstream, GRAPHGATE_STORE="postgresql://graphgate:pw@127.0.0.1:9/graphgate",
                      PYTHONPATH=f"{shim}{os.pathsep}{ROOT}")
    probe = subprocess.run([sys.executable, "-c", "import psycopg"], capture_output=True, text=True, env=env,
                           timeout=60)
    assert probe.returncode != 0 and "No module named 'psycopg'" in probe.stderr   # the shim works
    for command in (("serve",), ("status",), ("ingest", str(tmp_path))):
        result = graphgate(*command, env=env)
        assert result.returncode == 1, (command, result.stderr)
        sentence = one_sentence(result)
        assert "PostgreSQL" in sentence and "pip install 'graphgate[postgresql]'" in sentence, sentence
        assert "pw" not in sentence   # the URI's password is never echoed
    # the settings are still shown: they are how the operator finds what to fix
    assert graphgate("settings", env=env).returncode == 0


# --- item 4: a second serve ---------------------------------------------------------------------


def test_a_second_serve_on_a_store_in_use_says_where_the_first_runs(tmp_path: Path, upstream: str) -> None:
    data = tmp_path / "data"
    server = Server(data, upstream)
    try:
        env = environment(tmp_path, upstream)
        for port in (server.port, free_port()):   # its own port, or another: the store is in use either way
            result = graphgate("serve", env={**env, "GRAPHGATE_PORT": str(port)})
            assert result.returncode == 1
            sentence = one_sentence(result)
            assert sentence.startswith(f"graphgate: GraphGate is already running on {server.url} with this store")
            assert str(data) in sentence
        assert server.process.poll() is None   # the first one still runs, untouched
        # a command that opens the store itself when no gateway answers on its port says the same
        status = graphgate("status", env=env)
        assert status.returncode == 1 and f"GraphGate is already running on {server.url}" in status.stderr
        assert "give that gateway's port with --port" in status.stderr
    finally:
        server.stop()
    assert not (data / "serving.json").exists()   # the note leaves with the gateway


def test_the_port_of_another_gateway_or_another_program_is_one_sentence(tmp_path: Path, upstream: str) -> None:
    server = Server(tmp_path / "first", upstream)
    try:
        env = environment(tmp_path, upstream, GRAPHGATE_PORT=str(server.port))   # another store, the same port
        taken = graphgate("serve", env=env)
        assert taken.returncode == 1
        assert one_sentence(taken) == (f"graphgate: GraphGate is already running on {server.url} (with another "
                                       "store): stop it, or give this one another port with --port (GRAPHGATE_PORT)")
        assert not (tmp_path / "data" / "graphgate.duckdb").exists()   # nothing started
    finally:
        server.stop()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = graphgate("serve", env={**env, "GRAPHGATE_PORT": str(port)})
    assert result.returncode == 1
    assert one_sentence(result) == (f"graphgate: port {port} on 127.0.0.1 is already in use by another program: "
                                    "stop it, or give GraphGate another port with --port (GRAPHGATE_PORT)")


def test_a_store_held_by_another_command_is_named(tmp_path: Path, upstream: str) -> None:
    """``graphgate mcp`` with no gateway on its port opens the store itself and holds it while it serves."""
    env = environment(tmp_path, upstream)
    assert graphgate("ingest", "--create", str(write(tmp_path / "team.txt", TEAM)), env=env).returncode == 0
    holder = subprocess.Popen([sys.executable, "-m", "proxy", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        serving = threading.Event()
        said: list[str] = []

        def read() -> None:
            assert holder.stderr is not None
            for line in holder.stderr:
                said.append(line)
                if "serving the store at" in line:   # logged once the store is open
                    serving.set()

        threading.Thread(target=read, daemon=True).start()
        assert serving.wait(60), "".join(said)
        result = graphgate("serve", env={**env, "GRAPHGATE_PORT": str(free_port())})
        assert result.returncode == 1
        sentence = one_sentence(result)
        assert sentence == (f"graphgate: `graphgate mcp` (process {holder.pid}) is using the store at "
                            f"{tmp_path / 'data'}: wait for it to finish, or stop it")
    finally:
        holder.kill()
        holder.wait(10)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- item 5: --version and status ---------------------------------------------------------------


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "proxy", "--version"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"graphgate {version('graphgate')}"


def test_status_is_a_short_summary_and_json_on_demand(tmp_path: Path, upstream: str, fake: FakeOllama) -> None:
    env = environment(tmp_path, upstream)
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in (("team.txt", TEAM), ("city.md", CITY), ("club.txt", CLUB)):
        write(folder / name, text)
    assert graphgate("ingest", "--create", str(folder), env=env).returncode == 0
    counts = json.loads(graphgate("status", "--json", env=env).stdout)["store"]
    result = graphgate("status", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) <= 8 and "{" not in result.stdout, result.stdout   # 70 lines of JSON before
    assert lines[0] == "knowledge base default: 3 documents processed"
    assert lines[1] == (f"graph: {counts['entities']} entities, {counts['relations']} relations, "
                        f"{counts['chunks']} chunks")
    assert counts["entities"] == len(PEOPLE) and "pipeline: idle" in lines and lines[-1].startswith("health: ")
    # a failed document is counted, and the summary says where to read why
    fake.fail_paths["/api/chat"] = 500   # the extraction model fails
    once = {**env, "GRAPHGATE_LLM_RETRIES": "1"}   # the failure is the point, not its retries
    assert graphgate("ingest", str(write(tmp_path / "more.txt", "Dora Grey visits Berlin.")), env=once).returncode == 1
    failed = graphgate("status", env=env).stdout.splitlines()
    assert failed[0] == "knowledge base default: 3 documents processed, 1 failed", failed
    assert any("GET /rag/documents?status=failed" in line for line in failed), failed
