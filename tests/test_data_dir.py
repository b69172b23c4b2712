"""One store, found the same way by the server and the CLI, whatever directory they start in.

The CLIs run as the user runs them: the installed ``graphgate`` entry point (``python -m proxy``)
in a directory of the test's, with no GRAPHGATE_DATA_DIR, so the user data directory (platformdirs:
$XDG_DATA_HOME/graphgate on Linux) is the default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from proxy.store.store import KnowledgeStore
from tests.servers import Server, silent_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A user of their own: XDG_DATA_HOME inside the test's directory, no GRAPHGATE_DATA_DIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHGATE_")}
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), TIKTOKEN_CACHE_DIR="", PYTHONPATH=str(ROOT),
               GRAPHGATE_PORT=str(silent_port()), GRAPHGATE_UPSTREAM=f"http://127.0.0.1:{silent_port()}")
    return env


def graphgate(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def make_store(directory: Path) -> None:
    async def create() -> None:
        store = await KnowledgeStore.open(directory)
        await store.close()

    anyio.run(create)


def effective_data_dir(result: subprocess.CompletedProcess[str]) -> str:
    line = next(line for line in result.stdout.splitlines() if line.startswith("GRAPHGATE_DATA_DIR"))
    return line.split()[1]


def test_the_default_store_is_the_users_whatever_the_directory(tmp_path: Path, home: dict[str, str]) -> None:
    here = graphgate("settings", env=home, cwd=tmp_path / "one")
    there = graphgate("settings", env=home, cwd=tmp_path / "two" / "deeper")
    assert here.returncode == there.returncode == 0
    assert effective_data_dir(here) == effective_data_dir(there) == str(tmp_path / "xdg" / "graphgate")


def test_without_gateway_or_store_the_cli_says_where_it_looked_and_creates_nothing(
        tmp_path: Path, home: dict[str, str]) -> None:
    (tmp_path / "notes.txt").write_text("Ada Lovelace wrote the first program.")
    store = tmp_path / "xdg" / "graphgate"
    for args in (("ingest", str(tmp_path / "notes.txt")), ("status",), ("query", "who?"), ("reindex",)):
        result = graphgate(*args, env=home, cwd=tmp_path / "work")
        assert result.returncode == 1, (args, result.stderr)
        message = " ".join(result.stderr.split())  # rich may wrap long lines
        assert f"no knowledge store at {store}" in message, (args, message)
        assert "Traceback" not in result.stderr
        if args[0] != "reindex":
            assert f"no gateway answers at http://127.0.0.1:{home['GRAPHGATE_PORT']}" in message
            assert "graphgate serve" in message
        assert ("--create" in message) == (args[0] == "ingest")
        assert not store.exists() and not (tmp_path / "work" / "graphgate-data").exists()


def test_a_store_left_in_the_current_directory_is_used_with_a_warning(tmp_path: Path, home: dict[str, str]) -> None:
    legacy = tmp_path / "project" / "graphgate-data"
    make_store(legacy)
    result = graphgate("status", "--json", env=home, cwd=tmp_path / "project")
    assert result.returncode == 0, result.stderr
    assert sum(json.loads(result.stdout)["store"]["documents"].values()) == 0
    message = " ".join(result.stderr.split())
    assert f"using the knowledge store in {legacy}" in message
    assert f"mv {legacy} {tmp_path / 'xdg' / 'graphgate'}" in message
    assert f"mkdir -p {tmp_path / 'xdg'} && mv" in message
    assert not (tmp_path / "xdg" / "graphgate").exists()  # nothing was made beside it
    settings = graphgate("settings", env=home, cwd=tmp_path / "project")
    assert effective_data_dir(settings) == str(legacy)
    assert "(a legacy ./graphgate-data)" in settings.stdout


def test_two_stores_are_not_guessed_between(tmp_path: Path, home: dict[str, str]) -> None:
    """A legacy store and one in the user data directory: either may hold the documents, so
    GraphGate names both and stops rather than leave one silently unused."""
    legacy = tmp_path / "project" / "graphgate-data"
    make_store(legacy)
    make_store(tmp_path / "xdg" / "graphgate")
    for args in (("serve",), ("status",)):
        result = graphgate(*args, env=home, cwd=tmp_path / "project")
        assert result.returncode == 2, result.stderr
        message = " ".join(result.stderr.split())
        assert f"two knowledge stores: {tmp_path / 'xdg' / 'graphgate'}" in message and str(legacy) in message
        assert "set GRAPHGATE_DATA_DIR to the one to use" in message and "Traceback" not in result.stderr
    chosen = graphgate("status", env={**home, "GRAPHGATE_DATA_DIR": str(legacy)}, cwd=tmp_path / "project")
    assert chosen.returncode == 0, chosen.stderr


def test_a_store_held_by_a_gateway_on_another_port_is_reported_not_duplicated(
        tmp_path: Path, home: dict[str, str]) -> None:
    data = tmp_path / "data"
    server = Server(data, home["GRAPHGATE_UPSTREAM"])
    try:
        env = {**home, "GRAPHGATE_DATA_DIR": str(data)}  # the same store, the default (wrong) port
        result = graphgate("status", env=env, cwd=tmp_path)
        assert result.returncode == 1
        message = " ".join(result.stderr.split())
        assert f"the knowledge store at {data} cannot be opened" in message
        assert "--port" in message and "Traceback" not in result.stderr
    finally:
        server.stop()
