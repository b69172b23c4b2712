"""The graphgate command line: ingest (with and without a running gateway), status, reindex."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store
from tests.servers import Server, silent_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def upstream(fake: FakeOllama) -> Iterator[str]:
    fake.structured = KnownFacts(PEOPLE)
    with fake.serve() as url:
        yield url


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "nested").mkdir(parents=True)
    (docs / "team.txt").write_text(TEAM)
    (docs / "nested" / "city.md").write_text(CITY)
    (docs / "nested" / "ignored.bin").write_bytes(b"\x00\x01")
    return docs


def graphgate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "TIKTOKEN_CACHE_DIR": "", **env})


def test_ingest_and_status_without_a_running_gateway(tmp_path: Path, upstream: str, folder: Path) -> None:
    env = {"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(tmp_path / "data"),
           "GRAPHGATE_PORT": str(silent_port())}
    result = graphgate("ingest", str(folder), "--create", env=env)
    assert result.returncode == 0, result.stderr
    assert "2 processed, 0 failed, 0 duplicate, 0 rejected" in result.stderr
    again = graphgate("ingest", str(folder / "team.txt"), env=env)
    assert "0 processed, 0 failed, 1 duplicate" in again.stderr
    status = graphgate("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    stats = json.loads(status.stdout)["store"]
    assert stats["documents"]["processed"] == 2 and stats["entities"] == len(PEOPLE)
    assert check_store(tmp_path / "data")["entities"] == len(PEOPLE)
    answered = graphgate("query", "Who works at Acme Corp?", "--mode", "local", "--json", env=env)
    assert answered.returncode == 0, answered.stderr
    result = json.loads(answered.stdout)
    assert result["mode"] == "local" and "Acme Corp" in {e["name"] for e in result["entities"]}
    printed = graphgate("query", "Berlin", "--num-ctx", "4096", env=env)
    assert "## Entities (knowledge graph)" in printed.stdout and "Berlin" in printed.stdout


def test_ingest_through_a_running_gateway_reports_rejections(tmp_path: Path, upstream: str, folder: Path) -> None:
    server = Server(tmp_path / "data", upstream)
    try:
        (folder / "empty.txt").write_text("")
        env = {"GRAPHGATE_PORT": str(server.port)}
        result = graphgate("ingest", str(folder), env=env)
        assert result.returncode == 1
        assert f"using the gateway at {server.url}" in result.stderr
        assert "rejected" in result.stderr and "empty.txt" in result.stderr
        assert "2 processed, 0 failed, 0 duplicate, 1 rejected" in result.stderr
        stats = httpx.get(server.url + "/rag/stats").json()
        assert stats["documents"]["processed"] == 2
    finally:
        server.stop()


def test_another_program_on_the_port_is_one_sentence_and_the_store_is_left_alone(tmp_path: Path,
                                                                                   upstream: str) -> None:
    """A web server that is not GraphGate on the command's port: its 404 page is not read as GraphGate's."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"404 page not found")

        def log_message(self, *args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        env = {"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(tmp_path / "data"),
               "GRAPHGATE_PORT": str(port)}
        result = graphgate("status", env=env)
    finally:
        other.shutdown()
        other.server_close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (f"something other than GraphGate answers at http://127.0.0.1:{port} (404 to /rag/stats)"
            in " ".join(result.stderr.split()))
    assert not (tmp_path / "data").exists()


def test_reindex_rebuilds_and_reembeds_for_a_new_model(tmp_path: Path, upstream: str, folder: Path,
                                                       fake: FakeOllama) -> None:
    data = tmp_path / "data"
    env = {"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(data), "GRAPHGATE_PORT": str(silent_port())}
    assert graphgate("ingest", str(folder), "--create", env=env).returncode == 0
    for name in ("chunks", "entities", "relations"):
        (data / f"{name}.usearch").unlink()
    rebuilt = graphgate("reindex", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "indexes rebuilt: chunks 2, entities 6, relations 5" in rebuilt.stderr
    embeds_before = len(fake.requests_to("/api/embed"))

    fake.models["bigger-embed:latest"] = dict(fake.models["nomic-embed-text:latest"], name="bigger-embed:latest",
                                              model="bigger-embed:latest")
    fake.embed_dims["bigger-embed:latest"] = 128
    new_env = {**env, "GRAPHGATE_EMBED_MODEL": "bigger-embed"}
    said = graphgate("status", env=new_env)   # the store's vectors are of another model: said, not refused
    assert said.returncode == 0 and "graphgate reindex" in said.stderr and "nomic-embed-text" in said.stderr
    reembedded = graphgate("reindex", env=new_env)
    assert reembedded.returncode == 0, reembedded.stderr
    assert len(fake.requests_to("/api/embed")) > embeds_before
    ok = graphgate("status", env=new_env)
    assert ok.returncode == 0, ok.stderr
    check_store(data)
    import duckdb
    con = duckdb.connect(str(data / "graphgate.duckdb"), read_only=True)
    embed_dim = con.execute("SELECT value FROM meta WHERE key = 'embed_dim'").fetchone()
    assert embed_dim is not None and embed_dim[0] == "128"
    assert con.execute("SELECT DISTINCT len(embedding) FROM entities").fetchall() == [(128,)]
    con.close()


def test_reindex_refuses_while_the_gateway_runs(tmp_path: Path, upstream: str) -> None:
    server = Server(tmp_path / "data", upstream)
    try:
        result = graphgate("reindex",
                           env={"GRAPHGATE_DATA_DIR": str(tmp_path / "data"), "GRAPHGATE_UPSTREAM": upstream})
        assert result.returncode == 1
        assert "stop `graphgate serve` first" in result.stderr
    finally:
        server.stop()


def test_ingest_of_same_named_files_keeps_the_later_one_and_finishes(tmp_path: Path, upstream: str) -> None:
    """Files are sent several at a time, but files of one name in order: the later in the listing is
    the version kept, whether the earlier one was still pending (superseded) or already processed."""
    docs = tmp_path / "docs"
    for folder, text in (("a", TEAM), ("b", CITY)):
        (docs / folder).mkdir(parents=True)
        (docs / folder / "notes.txt").write_text(text)
    env = {"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(tmp_path / "data"),
           "GRAPHGATE_PORT": str(silent_port())}
    result = graphgate("ingest", str(docs), "--create", env=env)
    assert result.returncode == 0, result.stderr
    assert "1 superseded" in result.stderr or "2 processed" in result.stderr, result.stderr
    stats = json.loads(graphgate("status", "--json", env=env).stdout)["store"]
    assert stats["documents"]["processed"] == 1 and sum(stats["documents"].values()) == 1
    chunks = json.loads(graphgate("query", "Berlin", "--mode", "naive", "--json", env=env).stdout)["chunks"]
    assert [c["content"] for c in chunks] == [CITY]  # the kept version is b/notes.txt (the city notes)


@pytest.mark.parametrize("command", ["serve", "ingest", "status", "reindex", "query", "settings"])
def test_every_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Setting descriptions contain a literal "%" (argparse %-formats help): --help must still print."""
    from proxy.cli.main import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: graphgate " + command in capsys.readouterr().out


def test_help_is_plain_text() -> None:
    result = subprocess.run([sys.executable, "-m", "proxy", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0
    assert "grounds every chat turn in your own documents" in " ".join(result.stdout.split())
    assert "``" not in result.stdout  # reStructuredText markup of a docstring


def test_settings_output_closed_early_is_not_an_error(tmp_path: Path) -> None:
    """`graphgate settings | head -1`: the reader leaves after one line; no traceback, exit 0."""
    process = subprocess.Popen([sys.executable, "-m", "proxy", "settings"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "TIKTOKEN_CACHE_DIR": ""},
                               bufsize=0)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # as `head -0` does; the output (a few KB) is written when it has left
    stderr = process.stderr.read().decode()
    assert process.wait(30) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_unset_settings_print_not_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHGATE_")}
    result = subprocess.run([sys.executable, "-m", "proxy", "settings"], capture_output=True, text=True, cwd=ROOT,
                            env={**env, "TIKTOKEN_CACHE_DIR": ""})
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    for name in ("GRAPHGATE_INBOX_DIR", "GRAPHGATE_LLM_MODEL", "GRAPHGATE_KEYWORD_MODEL", "GRAPHGATE_API_KEY"):
        assert "(not set)" in rows[name], rows[name]
    assert "None" not in result.stdout
    # one column of values: each starts where the longest name ends, plus one space
    width = max(map(len, rows))
    assert all(line[width] == " " and line[width + 1] != " " for line in rows.values()), result.stdout


def test_a_guarded_gateway_asks_the_command_for_its_key(tmp_path: Path, upstream: str) -> None:
    server = Server(tmp_path / "data", upstream, GRAPHGATE_ADMIN_PASSWORD="pw-cli-guarded")
    try:
        env = {"GRAPHGATE_PORT": str(server.port), "GRAPHGATE_DATA_DIR": str(tmp_path / "data")}
        result = graphgate("status", env=env)
        assert result.returncode == 1
        message = " ".join(result.stderr.split())
        assert f"the gateway at {server.url} needs its API key: set GRAPHGATE_API_KEY" in message
        assert "Traceback" not in result.stderr
    finally:
        server.stop()
