"""The settings table: defaults, environment, command-line overrides, errors, documentation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli.main import build_parser
from proxy.core.settings import SETTINGS, Settings, SettingsError, settings_markdown
from proxy.core.settings_rows import settings_rows

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_match_the_table() -> None:
    loaded = Settings.load(environ={})
    assert loaded == Settings()
    assert loaded.upstream == "http://127.0.0.1:11434"
    assert loaded.host == "127.0.0.1"
    assert loaded.port == 11435
    assert loaded.data_dir == Path(os.environ["XDG_DATA_HOME"]) / "graphgate"  # conftest's XDG_DATA_HOME
    assert loaded.api_key is None
    assert set(loaded.sources.values()) == {"default"}


def test_required_variable_names() -> None:
    names = {s.env for s in SETTINGS}
    for required in ("GRAPHGATE_UPSTREAM", "GRAPHGATE_HOST", "GRAPHGATE_PORT", "GRAPHGATE_DATA_DIR",
                     "GRAPHGATE_API_KEY", "GRAPHGATE_MAX_BODY_BYTES", "GRAPHGATE_CONNECT_TIMEOUT",
                     "GRAPHGATE_READ_TIMEOUT", "GRAPHGATE_CORS_ORIGINS", "GRAPHGATE_LOG_LEVEL"):
        assert required in names


def test_environment_then_cli_override() -> None:
    env = {"GRAPHGATE_PORT": "9000", "GRAPHGATE_UPSTREAM": "http://127.0.0.1:9999/", "GRAPHGATE_API_KEY": "k"}
    loaded = Settings.load(environ=env, overrides={"port": "9100", "host": None})
    assert loaded.port == 9100
    assert loaded.upstream == "http://127.0.0.1:9999"  # trailing slash dropped
    assert loaded.api_key == "k"
    assert loaded.sources["port"] == "cli"
    assert loaded.sources["upstream"] == "env"
    assert loaded.sources["host"] == "default"


@pytest.mark.parametrize(("env", "value", "fragment"), [
    ("GRAPHGATE_PORT", "eleven", "GRAPHGATE_PORT"),
    ("GRAPHGATE_PORT", "70000", "between 0 and 65535"),
    ("GRAPHGATE_UPSTREAM", "ftp://x", "http:// or https://"),
    ("GRAPHGATE_UPSTREAM", "http://127.0.0.1:99999", "between 0 and 65535"),
    ("GRAPHGATE_UPSTREAM", "http://:11434", "names no host"),
    ("GRAPHGATE_MAX_BODY_BYTES", "12 parsecs", "size"),
    ("GRAPHGATE_READ_TIMEOUT", "-1", "greater than 0"),
    ("GRAPHGATE_LOG_LEVEL", "loud", "debug, info"),
    ("GRAPHGATE_CORS_ORIGINS", "localhost:3000", "needs a scheme"),
    ("GRAPHGATE_DB_MEMORY", "lots", "512MB"),
    ("GRAPHGATE_VECTOR_DTYPE", "f64", "f32, f16, i8"),
    ("GRAPHGATE_RAISE_NUM_CTX", "maybe", "true or false"),
    ("GRAPHGATE_GLEANING", "7", "from 0 to 3"),
])
def test_bad_values_name_the_variable(env: str, value: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(environ={env: value})
    assert env in str(info.value)
    assert fragment in str(info.value)
    assert repr(value) in str(info.value)


def test_bad_cli_value_names_the_flag() -> None:
    with pytest.raises(SettingsError, match="--port"):
        Settings.load(environ={}, overrides={"port": "x"})


def test_sizes_accept_units() -> None:
    assert Settings.load(environ={"GRAPHGATE_MAX_BODY_BYTES": "2MiB"}).max_body_bytes == 2 * 1024 * 1024
    assert Settings.load(environ={"GRAPHGATE_MAX_BODY_BYTES": "50MB"}).max_body_bytes == 50_000_000


def test_secrets_are_masked_in_descriptions() -> None:
    rows = settings_rows(Settings.load(environ={"GRAPHGATE_API_KEY": "s3cret-value"}))
    shown = " ".join(value for _, value, _ in rows)
    assert "s3cret-value" not in shown
    assert "(set, hidden)" in shown


def test_every_setting_is_a_cli_flag() -> None:
    args = build_parser().parse_args(["serve", *[x for s in SETTINGS for x in (s.flag, s.default or "x")]])
    for setting in SETTINGS:
        assert getattr(args, setting.name) is not None


def test_the_configuration_reference_is_the_generated_table() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text()
    block = reference.split("<!-- settings:start -->")[1].split("<!-- settings:end -->")[0]
    assert block.strip() == settings_markdown().strip(), \
        "run `graphgate settings --markdown` and paste it into docs/configuration.md"
    for setting in SETTINGS:
        assert f"`{setting.env}`" in block


def test_cli_rejects_bad_environment_with_a_clear_message() -> None:
    result = subprocess.run([sys.executable, "-m", "proxy", "serve"], capture_output=True, text=True,
                            env={"GRAPHGATE_PORT": "eleven", "PATH": "/usr/bin:/bin"}, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert "GRAPHGATE_PORT" in result.stderr and "'eleven'" in result.stderr


def test_an_invalid_secret_is_refused_without_being_echoed() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.load({"GRAPHGATE_STORE": "postgress://graphgate:s3cret-pw@db:5432/graphgate"})
    assert "GRAPHGATE_STORE" in str(refused.value) and "s3cret-pw" not in str(refused.value)
    assert "expected embedded or a URI" in str(refused.value)


def test_graphgate_settings_says_what_the_console_says() -> None:
    """Issue 30, item 7, on the command line: a secret at its default is shown as it is (the store is
    `embedded`, from "default"), a set one is hidden with its real source."""
    result = subprocess.run([sys.executable, "-m", "proxy", "settings"], capture_output=True, text=True, cwd=ROOT,
                            env={"PATH": "/usr/bin:/bin", "GRAPHGATE_API_KEY": "s3cret-value",
                                 "GRAPHGATE_DATA_DIR": "/nonexistent/graphgate-settings-test"}, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "embedded" in lines["GRAPHGATE_STORE"] and "(default)" in lines["GRAPHGATE_STORE"]
    assert "(set, hidden)" in lines["GRAPHGATE_API_KEY"] and "(environment)" in lines["GRAPHGATE_API_KEY"]
    assert "s3cret-value" not in result.stdout


def test_every_field_of_a_settings_section_is_a_row_of_the_table() -> None:
    """The sections are views of the one table: a field no row names is refused at import."""
    from typing import Protocol

    from proxy.core.settings_sections import SECTIONS, unknown_fields

    assert unknown_fields(SECTIONS) == []

    class Planted(Protocol):
        @property
        def chunk_tokens(self) -> int: ...
        @property
        def chunk_tokenz(self) -> int: ...

    assert unknown_fields((Planted,)) == ["Planted.chunk_tokenz"]


def test_the_retrieval_section_reads_every_knob() -> None:
    """A query's defaults are every knob: a retrieval section without one is refused at import."""
    from typing import Protocol

    from proxy.core.settings_sections import RetrievalSettings, missing_knobs

    assert missing_knobs(RetrievalSettings) == []

    class Planted(Protocol):
        @property
        def top_k(self) -> int: ...

    assert "top_k" not in missing_knobs(Planted) and "chunk_top_k" in missing_knobs(Planted)
