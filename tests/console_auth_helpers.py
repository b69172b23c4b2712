"""Logging in to the console of an in-process gateway: the test password, a client seen from a
chosen address, the login itself, and every console route with its placeholders filled in."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import httpx
from starlette.routing import Mount, Route

from proxy.app import Settings, create_app
from tests.conftest import running
from tests.fake_ollama import FakeOllama
from tests.matching import must_find

PASSWORD = "correct horse battery staple"


@contextlib.asynccontextmanager
async def console_client(settings: Settings, fake: FakeOllama, *, client_host: str = "127.0.0.1",
                         app=None) -> AsyncIterator[httpx.AsyncClient]:
    app = app or create_app(settings, upstream_transport=fake.transport())
    async with running(app):
        transport = httpx.ASGITransport(app=app, client=(client_host, 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435") as client:
            yield client


async def log_in(client: httpx.AsyncClient, password: str = PASSWORD) -> httpx.Response:
    page = await client.get("/admin/login")
    token = must_find(r'name="csrf" value="([^"]+)"', page.text).group(1)
    return await client.post("/admin/login", data={"csrf": token, "password": password, "next": "/admin/entities"})


def console_paths(app) -> list[tuple[str, str]]:
    """(method, concrete path) for every console route, with placeholders filled in."""
    out = []
    mount = next(r for r in app.routes if isinstance(r, Mount) and r.path == "/admin")
    for route in mount.routes:
        if isinstance(route, Route):
            if route.methods is None:
                raise AssertionError(f"{route.path} names no methods")
            path = "/admin" + re.sub(r"\{[^}]+\}", "x", route.path)
            for method in sorted(route.methods - {"HEAD"}):
                out.append((method, path))
    return out
