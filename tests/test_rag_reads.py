"""A console password guards the /rag reads too (issue 16, item 10): with only
GRAPHGATE_ADMIN_PASSWORD set, every /rag read (the traces hold every user's questions) needs
the console login or the API key, as the console showing the same data does; /rag/health stays
open; with neither password nor key, loopback reads stay open as before."""

from __future__ import annotations

import re

import pytest
from starlette.routing import Route

from proxy.app import Settings, create_app
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.fake_ollama import FakeOllama


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)


def rag_reads(app) -> list[tuple[str, str]]:
    """(method, concrete path) of every /rag read: its GET routes and POST /rag/query."""
    out = [("POST", "/rag/query")]
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/rag/") and "GET" in (route.methods or ()):
            out.append(("GET", re.sub(r"\{[^}]+\}", "Ada", route.path)))
    return out


@pytest.mark.anyio
async def test_a_password_alone_guards_every_rag_read(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings.replace(admin_password=PASSWORD), upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        reads = rag_reads(app)
        assert {"/rag/traces", "/rag/documents", "/rag/entities/Ada", "/rag/stats"} <= {p for _, p in reads}, reads
        for method, path in reads:
            if path == "/rag/health":
                continue
            response = await client.request(method, path, json={"query": "who?"} if method == "POST" else None)
            assert response.status_code == 401, (method, path, response.status_code)
            assert "log in to the console" in response.json()["error"], path
        assert (await client.get("/rag/health")).status_code == 200  # the public read stays public
        await log_in(client)
        for method, path in reads:  # the login opens them, without a CSRF token (they change nothing)
            response = await client.request(method, path, json={"query": "who?"} if method == "POST" else None)
            assert response.status_code not in (401, 403), (method, path, response.status_code)


@pytest.mark.anyio
async def test_the_key_opens_rag_reads_next_to_a_password(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings.replace(admin_password=PASSWORD, api_key="k-1"), upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        assert (await client.get("/rag/traces")).status_code == 401
        assert (await client.get("/rag/traces", headers={"Authorization": "Bearer k-1"})).status_code == 200


@pytest.mark.anyio
async def test_without_password_or_key_loopback_reads_stay_open(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings, upstream_transport=fake.transport())
    async with console_client(settings, fake, app=app) as client:
        for method, path in rag_reads(app):
            response = await client.request(method, path, json={"query": "who?"} if method == "POST" else None)
            assert response.status_code not in (401, 403), (method, path, response.status_code)
