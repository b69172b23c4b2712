"""README.md's two commands stay true (the test command is the one CI runs), README stays short, and
the documentation holds together: every page indexed, every page it names there, nothing outside."""

from __future__ import annotations

import re
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


def test_readme_reads_in_five_minutes() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


DOCS = ROOT / "docs"
# a page of docs/ named in prose: `docs/x.md`, or `x.md` in docs/index.md
NAMED_PAGE = re.compile(r"`(?:docs/)?([a-z0-9-]+\.(?:md|yml))`")


def test_the_index_lists_every_page_of_docs() -> None:
    index = (DOCS / "index.md").read_text()
    named = set(NAMED_PAGE.findall(index))
    pages = {p.name for p in DOCS.iterdir() if p.suffix in (".md", ".yml")} - {"index.md"}
    assert pages - named == set(), "pages docs/index.md does not list"


def test_every_document_named_exists() -> None:
    """README and every page name only files of this repository, and only ones that exist."""
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        text = page.read_text()
        for name in re.findall(r"`docs/([a-z0-9-]+\.(?:md|yml))`", text):
            assert (DOCS / name).is_file(), f"{page.name} names docs/{name}"
        for path in re.findall(r"`((?:bench|tests|proxy|admin|deploy)/[\w/.-]+\.(?:py|sh|conf|yml))`", text):
            assert (ROOT / path).exists(), f"{page.name} names {path}"
        assert "../shared" not in text and not re.search(r"\bseeds?/\d", text), page.name
