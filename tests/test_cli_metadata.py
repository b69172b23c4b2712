"""The command line's metadata flags, driven in-process (``proxy.cli.main.main``): ``graphgate
ingest --metadata JSON --meta KEY=VALUE`` (sent as the upload's metadata) and ``graphgate query
--filter JSON`` (sent as /rag/query's ``filters``), through a running gateway and without one;
bad JSON stops the command with a readable message and a non-zero exit before anything is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import duckdb
import httpx
import pytest

from proxy.cli.commands import CommandError, _meta_value, upload_metadata
from proxy.cli.main import main
from proxy.core.data_dir import DATABASE_FILE, has_store
from proxy.core.settings import Settings
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.servers import silent_port

QUESTION = "Where is Acme Corp headquartered, and who works there?"


@pytest.fixture
def upstream(fake: FakeOllama, facts: KnownFacts) -> Iterator[str]:
    with fake.serve() as url:
        yield url


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "team.txt").write_text(TEAM)
    (folder / "city.md").write_text(CITY)
    return folder


def graphgate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """One command in this process: (exit status, stdout, stderr with its lines joined)."""
    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, " ".join(err.split())


def stored_metadata(data: Path) -> dict[str, Any]:
    """name -> metadata, read from the store's file (no gateway holds it after the command)."""
    with duckdb.connect(str(data / DATABASE_FILE), read_only=True) as con:
        return {name: json.loads(meta) for name, meta in con.execute("SELECT name, metadata FROM documents").fetchall()}


def test_ingest_sends_the_metadata_flags_and_query_the_filter(tmp_path: Path, upstream: str, docs: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    flags = ["--upstream", upstream, "--data-dir", str(data), "--port", str(silent_port())]
    status, _, err = graphgate(capsys, "ingest", str(docs / "team.txt"), "--create", *flags,
                               "--metadata", '{"category": "projects", "year": 2020, "source": "wiki"}',
                               "--meta", "year=2024", "--meta", "tags=orion", "--meta", "tags=staff",
                               "--meta", "code=007", "--meta", "ratio=0.5")
    assert status == 0, err
    assert "1 processed, 0 failed" in err
    status, _, err = graphgate(capsys, "ingest", str(docs / "city.md"), *flags, "--meta", "category=places")
    assert status == 0, err
    assert stored_metadata(data) == {
        "team.txt": {"category": "projects", "year": 2024, "source": "wiki", "tags": ["orion", "staff"],
                     "code": "007", "ratio": 0.5},
        "city.md": {"category": "places"},
    }

    status, out, err = graphgate(capsys, "query", QUESTION, *flags, "--json", "--filter", '{"category": "places"}')
    assert status == 0, err
    result = json.loads(out)
    assert result["filtered"] == {"filters": '{"category": "places"}', "documents": 1}
    assert {d for chunk in result["chunks"] for d in chunk["documents"]} == {"city.md"}
    status, out, err = graphgate(capsys, "query", QUESTION, *flags, "--filter", '{"year": {"$gte": 2024}}')
    assert status == 0, err
    assert 'filter {"year": {"$gte": 2024}}: 1 documents match' in out
    assert "Orion" in out and "Carol White" not in out
    status, out, _ = graphgate(capsys, "query", QUESTION, *flags, "--filter", '{"code": 7}')  # "007" is text
    assert status == 0 and "(no context: no searchable document matches the filter)" in out


def test_flags_through_a_running_gateway(settings: Settings, upstream: str, docs: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.app import create_app
    from tests.live import serve_in_thread

    with serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        flags = ["--port", str(urlsplit(url).port)]
        status, _, err = graphgate(capsys, "ingest", str(docs), *flags, "--meta", "team=a")
        assert status == 0 and f"using the gateway at {url}" in err and "2 processed" in err, err
        listed = httpx.get(url + "/rag/documents", params={"filter": '{"team": "a"}'}, trust_env=False).json()
        assert sorted(d["name"] for d in listed["documents"]) == ["city.md", "team.txt"]
        status, out, err = graphgate(capsys, "query", QUESTION, *flags, "--json", "--filter",
                                     '{"$document": "team.txt"}')
        assert status == 0, err
        assert {d for chunk in json.loads(out)["chunks"] for d in chunk["documents"]} == {"team.txt"}


@pytest.mark.parametrize(("flags", "said"), [
    (["--metadata", '{"category": '], "--metadata is not valid JSON"),
    (["--metadata", "[1, 2]"], "--metadata must be a JSON object"),
    (["--metadata", '{"owner": {"name": "x"}}'], "--metadata['owner'] must be a string"),
    (["--meta", "category"], "--meta takes KEY=VALUE, not 'category'"),
    (["--meta", "$op=1"], "not starting with '$'"),
    (["--meta", "=1"], "keys must be non-empty strings"),
])
def test_bad_metadata_flags_stop_before_anything_is_sent(tmp_path: Path, upstream: str, docs: Path,
                                                         fake: FakeOllama, capsys: pytest.CaptureFixture[str],
                                                         flags: list[str], said: str) -> None:
    data = tmp_path / "data"
    status, _, err = graphgate(capsys, "ingest", str(docs), "--create", "--upstream", upstream,
                               "--data-dir", str(data), "--port", str(silent_port()), *flags)
    assert status == 1
    assert said in err and err.startswith("graphgate: ") and "Traceback" not in err
    assert not has_store(data)  # no store made, nothing uploaded
    assert fake.requests == []


@pytest.mark.parametrize(("text", "said"), [
    ("{category", "--filter is not valid JSON"),
    ('{"year": {"$near": 1}}', "unknown operator '$near'"),
    ('"hr"', "--filter must be a JSON object"),
])
def test_a_bad_filter_flag_is_said_before_any_gateway_is_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               text: str, said: str) -> None:
    status, out, err = graphgate(capsys, "query", QUESTION, "--data-dir", str(tmp_path / "none"),
                                 "--port", str(silent_port()), "--filter", text)
    assert status == 1 and out == ""
    assert said in err and "no gateway answers" not in err


def test_meta_values_read_as_json_numbers_or_stay_text() -> None:
    cases = {"2024": 2024, "-3": -3, "0.5": 0.5, "1e3": 1000.0, "0": 0, "007": "007", "1e999": "1e999",
             "NaN": "NaN", "+1": "+1", "1_000": "1_000", "hr": "hr", "": ""}
    for text, expected in cases.items():
        value = _meta_value(text)
        assert value == expected and type(value) is type(expected), text
    assert upload_metadata(None, None) is None and upload_metadata(None, []) is None
    assert upload_metadata('{"a": 1, "b": "x"}', ["b=y", "c=1", "c=two", "c=3"]) == {"a": 1, "b": "y",
                                                                                     "c": [1, "two", 3]}
    assert upload_metadata("{}", None) == {}
    with pytest.raises(CommandError, match="a list holds at most 100"):
        upload_metadata(None, [f"k={i}" for i in range(101)])


def test_the_flags_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.cli.main import build_parser

    for command, flags in (("ingest", ("--metadata JSON", "--meta KEY=VALUE")), ("query", ("--filter JSON",))):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        out = capsys.readouterr().out
        assert all(flag in out for flag in flags), out
