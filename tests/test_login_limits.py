"""Login brute force (issue 16, item 8): a few guesses per client and a cap for all clients
together per minute, then 429 with Retry-After and a readable page; the right password works
again once the window has passed. The limiter's clock is the test's, so nothing here waits."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from admin import routes_auth
from proxy.app import Settings, create_app
from proxy.guards.login_limit import OVERALL, PER_CLIENT, WINDOW, client_key
from tests.conftest import running
from tests.console_auth_helpers import PASSWORD, log_in
from tests.fake_ollama import FakeOllama
from tests.matching import must_find


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_auth, "FAILED_LOGIN_DELAY", 0.01)


@contextlib.asynccontextmanager
async def console(settings: Settings, fake: FakeOllama) -> AsyncIterator[tuple[object, Clock]]:
    app = create_app(settings.replace(admin_password=PASSWORD), upstream_transport=fake.transport())
    clock = Clock()
    async with running(app):
        app.state.gateway.console.auth.logins.clock = clock
        yield app, clock


def client_from(app, host: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435")


@pytest.mark.anyio
async def test_a_client_is_locked_out_after_a_few_failures(settings: Settings, fake: FakeOllama) -> None:
    async with console(settings, fake) as (app, clock), client_from(app, "203.0.113.7") as guesser, \
            client_from(app, "203.0.113.8") as other:
        for _ in range(PER_CLIENT):
            assert (await log_in(guesser, "wrong")).status_code == 401
        locked = await log_in(guesser, "wrong")
        assert locked.status_code == 429
        wait = int(locked.headers["retry-after"])
        assert 0 < wait <= WINDOW
        assert re.search(r"Too many login attempts from your address\. Try again in \d+ seconds", locked.text)
        right = await log_in(guesser)  # the right password too: else the lockout only delays a guess
        assert right.status_code == 429
        assert (await guesser.get("/admin/", follow_redirects=False)).status_code == 303  # still not logged in
        assert (await log_in(other, "wrong")).status_code == 401  # another address has its own count
        clock.now += wait
        assert (await log_in(guesser)).status_code == 303  # the window passed: the right password works
        assert (await guesser.get("/admin/", follow_redirects=False)).status_code == 200


@pytest.mark.anyio
async def test_a_success_forgives_the_earlier_failures(settings: Settings, fake: FakeOllama) -> None:
    async with console(settings, fake) as (app, clock), client_from(app, "198.51.100.1") as user:
        for _ in range(PER_CLIENT - 1):
            assert (await log_in(user, "typo")).status_code == 401
        assert (await log_in(user)).status_code == 303
        user.cookies.clear()
        for _ in range(PER_CLIENT):
            assert (await log_in(user, "typo")).status_code == 401


@pytest.mark.anyio
async def test_many_parallel_clients_get_only_the_overall_cap(settings: Settings, fake: FakeOllama) -> None:
    """150 addresses guessing in parallel (the review's 600 guesses in 11 s): at most OVERALL get
    their guess checked in a window, the rest 429, and every answer comes back (no lock held)."""
    async with console(settings, fake) as (app, clock):
        clients = [client_from(app, f"10.1.{i // 250}.{i % 250 + 1}") for i in range(150)]
        tokens = []
        for client in clients:
            page = await client.get("/admin/login")
            tokens.append(must_find(r'name="csrf" value="([^"]+)"', page.text).group(1))
        statuses: list[int] = []

        async def guess(client: httpx.AsyncClient, token: str, n: int) -> None:
            for _ in range(n):
                response = await client.post("/admin/login", data={"csrf": token, "password": "guess"})
                statuses.append(response.status_code)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for client, token in zip(clients, tokens, strict=True):
                    tg.start_soon(guess, client, token, 4)
        assert len(statuses) == 600
        assert statuses.count(401) == OVERALL
        assert statuses.count(429) == 600 - OVERALL
        late = await clients[-1].post("/admin/login", data={"csrf": tokens[-1], "password": PASSWORD})
        assert late.status_code == 429 and "from all addresses together" in late.text
        clock.now += WINDOW + 1
        assert (await clients[-1].post("/admin/login", data={"csrf": tokens[-1], "password": PASSWORD},
                                       follow_redirects=False)).status_code == 303
        for client in clients:
            await client.aclose()


def test_an_ipv6_host_counts_as_its_64() -> None:
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert client_key("2001:db8:0:1::1") != client_key("2001:db8::1")
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert client_key("192.0.2.1") == "192.0.2.1"
