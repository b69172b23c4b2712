"""The command line's ``--kb``: ``graphgate ingest``, ``status``, ``query`` and ``reindex`` work on the knowledge
base it names, through a running gateway and without one; a base that does not exist stops the
command with the reason and a non-zero exit, and nothing is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from proxy.app import create_app
from proxy.core.settings import Settings
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.servers import silent_port
from tests.test_cli_metadata import graphgate


@pytest.fixture
def upstream(fake: FakeOllama, facts: KnownFacts) -> Iterator[str]:
    with fake.serve() as url:
        yield url


def test_ingest_status_and_query_on_a_named_base_through_a_gateway(
        settings: Settings, upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "team.txt").write_text(TEAM)
    (tmp_path / "city.md").write_text(CITY)
    with serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        assert httpx.post(url + "/rag/kbs", json={"name": "hr"}, trust_env=False).status_code == 201
        flags = ["--port", str(urlsplit(url).port)]
        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "team.txt"), *flags, "--kb", "hr")
        assert status == 0 and "1 processed" in err, err
        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "city.md"), *flags)
        assert status == 0 and "1 processed" in err, err

        status, out, err = graphgate(capsys, "status", *flags, "--kb", "hr", "--json")
        assert status == 0, err
        assert json.loads(out)["store"]["documents"]["processed"] == 1
        status, out, err = graphgate(capsys, "query", "Who works at Acme Corp?", *flags, "--kb", "hr", "--json")
        assert status == 0, err
        assert {d for chunk in json.loads(out)["chunks"] for d in chunk["documents"]} == {"team.txt"}
        status, out, err = graphgate(capsys, "query", "Who works at Acme Corp?", *flags, "--json")
        assert {d for chunk in json.loads(out)["chunks"] for d in chunk["documents"]} == {"city.md"}

        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "team.txt"), *flags, "--kb", "sales")
        assert status == 1 and "no knowledge base named 'sales'" in err and "POST /rag/kbs" in err
        listed = httpx.get(url + "/rag/kbs", trust_env=False).json()["kbs"]
        assert sorted(b["name"] for b in listed) == ["default", "hr"]   # nothing was made by the failed command


def test_an_unknown_base_stops_a_command_without_a_gateway(tmp_path: Path, upstream: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    (tmp_path / "team.txt").write_text(TEAM)
    flags = ["--upstream", upstream, "--data-dir", str(data), "--port", str(silent_port())]
    status, _, err = graphgate(capsys, "ingest", str(tmp_path / "team.txt"), "--create", *flags)
    assert status == 0, err
    for command in (["status"], ["query", "Who?"], ["ingest", str(tmp_path / "team.txt")]):
        status, _, err = graphgate(capsys, *command, *flags, "--kb", "nope")
        assert status == 1 and "no knowledge base named 'nope'" in err, (command, err)
    status, out, err = graphgate(capsys, "status", *flags, "--json")
    assert status == 0 and json.loads(out)["store"]["documents"]["processed"] == 1   # default untouched
    status, _, err = graphgate(capsys, "status", *flags, "--kb", "Bad Name!")
    assert status == 1 and "knowledge base" in err, err


def test_reindex_a_named_base(settings: Settings, upstream: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "team.txt").write_text(TEAM)
    with serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        assert httpx.post(url + "/rag/kbs", json={"name": "hr"}, trust_env=False).status_code == 201
        status, _, err = graphgate(capsys, "ingest", str(tmp_path / "team.txt"), "--port",
                                   str(urlsplit(url).port), "--kb", "hr")
        assert status == 0 and "1 processed" in err, err
    flags = ["--upstream", upstream, "--data-dir", str(settings.data_dir), "--port", str(silent_port())]
    status, out, err = graphgate(capsys, "reindex", *flags, "--kb", "hr")
    assert status == 0, err
    sizes = dict(part.split() for part in (out + err).split("indexes rebuilt: ")[1].split("\n")[0].split(", "))
    assert int(sizes["chunks"]) == 1 and int(sizes["entities"]) >= 3   # hr's, not default's (empty)
    status, out, err = graphgate(capsys, "reindex", *flags)
    assert status == 0, err
    sizes = dict(part.split() for part in (out + err).split("indexes rebuilt: ")[1].split("\n")[0].split(", "))
    assert int(sizes["chunks"]) == 0
    status, _, err = graphgate(capsys, "reindex", *flags, "--kb", "sales")
    assert status == 1 and "no knowledge base named 'sales'" in err, err
    status, out, err = graphgate(capsys, "status", *flags, "--kb", "hr", "--json")   # hr still whole after its reindex
    assert status == 0 and json.loads(out)["store"]["documents"]["processed"] == 1, err
