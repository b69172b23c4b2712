"""README.md's two commands stay true: the test command is the one CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(ci) if "README test command" in line)
    command = ci[marker + 1].strip()
    assert command in (ROOT / "README.md").read_text()


def test_readme_first_command_installs_and_serves() -> None:
    """The quick start a newcomer types: clone, cd, a venv, a regular install (what
    tests/test_packaging.py builds and runs), the installed entry point."""
    readme = (ROOT / "README.md").read_text()
    assert "git clone " in readme and " graphgate && cd graphgate" in readme
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/graphgate serve" in readme
    assert "ollama pull llama3.2 && ollama pull nomic-embed-text" in readme
    scripts = (ROOT / "pyproject.toml").read_text()
    assert 'graphgate = "proxy.cli.main:main"' in scripts


def test_public_surface() -> None:
    import proxy.app

    assert sorted(proxy.app.__all__) == ["Settings", "create_app"]
