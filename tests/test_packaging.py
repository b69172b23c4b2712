"""GraphGate as a user installs it: the built wheel in a fresh virtual environment, and the
Dockerfile's own install and start steps, each run from a directory that is not the checkout.

The rest of the suite runs the editable, in-tree install, which hid a wheel that crashed at start
(its templates were not found). Here nothing of the checkout is importable: the fresh environment
sees only the installed package and the distributions that pyproject.toml's dependencies (and the
build's requirements) name, recursively, linked from the test environment's site-packages into a
folder its .pth line adds. So no network is needed, and an import of something GraphGate does not
declare fails here as it would on a user's machine.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.corpus import PEOPLE, TEAM
from tests.dockerfile_parsing import (
    copy_sources_and_dest,
    exec_or_shell,
    find,
    healthcheck_argv,
    merged_env,
    parse_dockerfile,
)
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.servers import free_port, silent_port

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Who works at Acme Corp?"


# ------------------------------------------------------------------------------------- helpers

def checkout_files() -> list[str]:
    """What a clone holds: tracked files plus new ones not ignored (never build/, .venv/, caches)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def copy_checkout(destination: Path, only: list[str] | None = None) -> Path:
    for name in checkout_files():
        if only is None or any(name == top or name.startswith(top.rstrip("/") + "/") for top in only):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def declared_distributions(roots: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``roots`` (requirement strings) need, recursively, with
    their extras; a declared one missing from the test environment fails the test."""
    found: dict[str, tuple[metadata.Distribution, set[str]]] = {}
    todo = [Requirement(root) for root in roots]
    while todo:
        requirement = todo.pop()
        key = canonicalize_name(requirement.name)
        if key in found and set(requirement.extras) <= found[key][1]:
            continue
        distribution = found[key][0] if key in found else metadata.distribution(requirement.name)
        extras = (found[key][1] if key in found else set()) | set(requirement.extras)
        found[key] = (distribution, extras)
        for raw in distribution.requires or []:
            needed = Requirement(raw)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append(needed)
    return [distribution for distribution, _ in found.values()]


def link_distributions(distributions: list[metadata.Distribution], folder: Path) -> None:
    folder.mkdir(parents=True)
    for distribution in distributions:
        assert distribution.files is not None, f"{distribution.metadata['Name']} lists no files"
        for top in {file.parts[0] for file in distribution.files if file.parts[0] != ".."}:
            target = folder / top
            if not target.exists() and not top.endswith(".pth"):
                target.symlink_to(Path(str(distribution.locate_file(top))))


def fresh_venv(path: Path) -> Path:
    """A new virtual environment whose only GraphGate is the one installed into it, and whose other
    packages are the declared dependencies (plus setuptools and wheel, the build's); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    roots = [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]
    link_distributions(declared_distributions(roots), path / "declared-dependencies")
    Path(purelib, "declared-dependencies.pth").write_text(str(path / "declared-dependencies") + "\n")
    return python


def pip(python: Path, *args: str) -> list[str]:
    """The test environment's pip, acting on another environment (pip's --python)."""
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", *args]


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A shell as a new user has it: no GRAPHGATE_* and nothing pointing into the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHGATE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), TIKTOKEN_CACHE_DIR="", **extra)
    return env


def imported_from(python: Path, cwd: Path) -> list[str]:
    code = "import proxy, admin, admin.templates; print(proxy.__file__); print(admin.templates.__file__)"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd,
                            env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    assert result.returncode == 0, result.stderr  # e.g. an import of an undeclared dependency
    return result.stdout.split()


class Gateway:
    """``graphgate serve`` (or the image's CMD) as its own process."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = cwd / "gateway.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the installed gateway did not start:\n{self.log.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def upstream() -> Iterator[tuple[FakeOllama, str]]:
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    with fake.serve() as url:
        yield fake, url


def check_running_gateway(gateway: Gateway, fake: FakeOllama, graphgate: list[str], env: dict[str, str],
                          cwd: Path) -> None:
    """What a new user does first: Ollama's banner, the console with its styles and htmx, one
    document in through the installed CLI, one grounded chat."""
    root = httpx.get(gateway.url + "/")
    assert root.status_code == 200 and root.text == "Ollama is running"

    page = httpx.get(gateway.url + "/admin/")
    assert page.status_code == 200, page.text
    assert 'href="/admin/static/console.css"' in page.text and "/admin/static/htmx/htmx.min.js" in page.text
    css = httpx.get(gateway.url + "/admin/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert css.content == (ROOT / "templates" / "static" / "console.css").read_bytes()
    script = httpx.get(gateway.url + "/admin/static/console.js")
    assert script.status_code == 200 and script.content == (ROOT / "templates" / "static" / "console.js").read_bytes()
    htmx = httpx.get(gateway.url + "/admin/static/htmx/htmx.min.js")
    assert htmx.status_code == 200 and "htmx" in htmx.text[:2000] and len(htmx.content) > 10_000

    (cwd / "team.txt").write_text(TEAM)
    ingested = subprocess.run([*graphgate, "ingest", "team.txt"], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=120)
    assert ingested.returncode == 0, ingested.stderr
    assert f"using the gateway at {gateway.url}" in ingested.stderr
    assert "1 processed, 0 failed" in ingested.stderr

    answer = httpx.post(gateway.url + "/api/chat", timeout=30, json={
        "model": "llama3.2", "stream": False, "messages": [{"role": "user", "content": QUESTION}]})
    assert answer.status_code == 200, answer.text
    [chat] = [r for r in fake.requests_to("/api/chat")
              if r.json and r.json["messages"][-1]["content"] == QUESTION]
    system = chat.json["messages"][0]
    assert system["role"] == "system" and "Acme Corp" in system["content"] and "Bob Jones" in system["content"]


# ---------------------------------------------------------------------------------------- tests

@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_serves_from_any_directory(
        tmp_path: Path, upstream: tuple[FakeOllama, str]) -> None:
    fake, upstream_url = upstream
    source = copy_checkout(tmp_path / "clone")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("graphgate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # every file of templates/ (the console's templates and static files) ships as admin/templates/
    console_files = {"admin/" + name for name in checkout_files()
                     if name.startswith("templates/") and name != "templates/README.md"}
    assert {name for name in names if name.startswith("admin/templates/")} == console_files
    assert not any(name.startswith(("tests/", "bench/")) for name in names)

    python = fresh_venv(tmp_path / "venv")
    installed = subprocess.run(pip(python, "install", "-q", "--no-deps", str(wheel)), capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for module in imported_from(python, elsewhere):
        assert Path(module).is_relative_to(tmp_path / "venv"), module

    port = free_port()
    env = user_env(tmp_path, GRAPHGATE_UPSTREAM=upstream_url, GRAPHGATE_PORT=str(port), GRAPHGATE_GLEANING="0")
    graphgate = [str(tmp_path / "venv" / "bin" / "graphgate")]
    gateway = Gateway([*graphgate, "serve"], env, elsewhere, port)
    try:
        check_running_gateway(gateway, fake, graphgate, env, elsewhere)
    finally:
        gateway.stop()
    # the store is the user's, not the directory's
    assert (tmp_path / "xdg" / "graphgate" / "graphgate.duckdb").is_file()
    assert not (elsewhere / "graphgate-data").exists()

    # an installation that lost a file of the console stops at start with one sentence
    package_dir = Path(imported_from(python, elsewhere)[1]).parent
    (package_dir / "static" / "console.css").unlink()
    broken = subprocess.run([*graphgate, "serve"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60)
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert "this GraphGate installation is incomplete: console.css is missing" in broken.stderr


@pytest.mark.slow
def test_the_dockerfile_steps_install_and_start_the_image(tmp_path: Path, upstream: tuple[FakeOllama, str]) -> None:
    """Docker is not available here, so its steps are replayed: the COPY lines into a stand-in for
    /app, the RUN that installs (its own shell line, with /app and pip pointed at the stand-ins), the
    ENV, WORKDIR and CMD, then the HEALTHCHECK command. Only the user creation is not replayed (it
    needs root and changes nothing GraphGate does), and the gateway listens on loopback."""
    fake, upstream_url = upstream
    instructions = parse_dockerfile((ROOT / "Dockerfile").read_text())
    [workdir] = [i.args for i in find(instructions, "WORKDIR")]
    app = tmp_path / "image" / workdir.lstrip("/")
    app.mkdir(parents=True)
    for copy in find(instructions, "COPY"):
        sources, destination = copy_sources_and_dest(copy.args)
        assert destination.startswith("./") or destination.startswith(workdir), destination
        copy_checkout(app, only=sources)
    python = fresh_venv(tmp_path / "venv")
    install_pip = shlex.join(pip(python, "--no-cache-dir")[:-1]) + " install --no-deps --no-build-isolation"
    installs = [i.args for i in find(instructions, "RUN") if "pip install" in i.args]
    assert len(installs) == 1, installs
    command = installs[0].replace("pip install", install_pip).replace(workdir, str(app))
    ran = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, cwd=app)
    assert ran.returncode == 0, ran.stderr
    assert not (app / "build").exists()  # the step removes its build leftovers

    env = merged_env(instructions)
    port = free_port()
    assert env["GRAPHGATE_DATA_DIR"] == "/data"
    env.update(GRAPHGATE_HOST="127.0.0.1", GRAPHGATE_PORT=str(port), GRAPHGATE_DATA_DIR=str(tmp_path / "data"),
               GRAPHGATE_UPSTREAM=upstream_url, GRAPHGATE_GLEANING="0")
    env = {**user_env(tmp_path), **env, "PATH": f"{tmp_path / 'venv' / 'bin'}:{os.environ['PATH']}"}
    [cmd] = find(instructions, "CMD")
    gateway = Gateway(exec_or_shell(cmd.args), env, app, port)
    try:
        health = [str(python) if arg in ("python", "python3") else arg.replace(":11435", f":{port}")
                  for arg in healthcheck_argv(instructions)]
        assert subprocess.run(health, cwd=app, env=env, timeout=30).returncode == 0
        check_running_gateway(gateway, fake, ["graphgate"], env, app)
    finally:
        gateway.stop()
    assert (tmp_path / "data" / "graphgate.duckdb").is_file()

    # with no Ollama behind it the image reports itself unhealthy (and says why on /rag/health)
    env.update(GRAPHGATE_UPSTREAM=f"http://127.0.0.1:{silent_port()}", GRAPHGATE_DATA_DIR=str(tmp_path / "data2"))
    gateway = Gateway(exec_or_shell(cmd.args), env, app, port)
    try:
        assert subprocess.run(health, cwd=app, env=env, timeout=30, capture_output=True).returncode != 0
        report = httpx.get(gateway.url + "/rag/health", timeout=15)
        assert report.status_code == 503 and "unreachable" in report.json()["error"]
    finally:
        gateway.stop()
