"""Shared fixtures: a fake Ollama upstream, GraphGate in-process over it, and live servers."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from proxy.app import Settings, create_app
from tests import background
from tests.corpus import PEOPLE
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.store_backends import (  # noqa: F401  (fixtures)
    backend_db,
    fresh_shared_lists,
    pg_schema,
    pg_server,
    store_backend,
    store_setting,
)

os.environ.setdefault("TIKTOKEN_CACHE_DIR", "")
# The default data directory is the user's (platformdirs honours XDG_DATA_HOME): a test, or a CLI
# run by a test, that does not name one must never touch the real ~/.local/share/graphgate.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="graphgate-test-xdg-")

# The in-process upstream is never contacted over the network; the URL only names it.
NOMINAL_UPSTREAM = "http://127.0.0.1:11434"

# traces and cache entries written beside a request are followed until committed (tests/background.py)
background.install()


@pytest.fixture(autouse=True)
def _background_writes_of_this_test() -> None:
    background.forget()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> FakeOllama:
    return FakeOllama()


@pytest.fixture
def facts(fake: FakeOllama) -> KnownFacts:
    """The fake upstream answers structured requests like a perfect model on the test corpus."""
    fake.structured = KnownFacts(PEOPLE)
    return fake.structured


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # the turns wait for the fake's keyword call: which keywords a search uses must not depend on
    # timing (tests/test_keyword_budget.py covers a call that comes back late)
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": NOMINAL_UPSTREAM,
                                  "GRAPHGATE_DATA_DIR": str(tmp_path / "data"), "GRAPHGATE_KEYWORD_BUDGET": "30"})


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[Starlette]:
    """Run the app's lifespan (httpx.ASGITransport does not)."""
    async with app.router.lifespan_context(app):
        yield app


@contextlib.asynccontextmanager
async def gateway_client(settings: Settings, fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, upstream_transport=fake.transport())
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435") as client:
            yield client


@pytest.fixture
async def client(settings: Settings, fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        yield client


@pytest.fixture
def live_upstream(fake: FakeOllama) -> Iterator[str]:
    with fake.serve() as url:
        yield url


@pytest.fixture
def live_gateway(settings: Settings, live_upstream: str) -> Iterator[str]:
    """GraphGate on a real uvicorn in front of the fake upstream on a real uvicorn."""
    app = create_app(settings.replace(upstream=live_upstream))
    with serve_in_thread(app) as url:
        yield url
