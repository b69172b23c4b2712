"""Logout ends the session (issue 16, item 6): after POST /admin/logout the old cookie opens
neither /admin/ nor /rag/* (with its old X-CSRF-Token), also after a restart; a restart with
another GRAPHGATE_ADMIN_PASSWORD ends every session."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from proxy.control.sessions import REVOKED_FILE
from proxy.core.settings import Settings
from proxy.guards.auth import COOKIE, Auth
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.console_helpers import csrf_of
from tests.fake_ollama import FakeOllama

DOC = {"name": "a.txt", "text": "Ada Lovelace wrote the first program."}


async def logged_in_cookie(client: httpx.AsyncClient) -> tuple[str, str]:
    await log_in(client)
    token = csrf_of((await client.get("/admin/")).text)
    return client.cookies[COOKIE], token


async def assert_refused(client: httpx.AsyncClient, cookie: str, token: str) -> None:
    client.cookies.clear()
    client.cookies.set(COOKIE, cookie)
    page = await client.get("/admin/", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/admin/login")
    upload = await client.post("/rag/documents", json=DOC, headers={"X-CSRF-Token": token})
    assert upload.status_code == 401, upload.text
    assert (await client.get("/rag/traces")).status_code == 401
    client.cookies.clear()


@pytest.mark.anyio
async def test_logout_revokes_the_cookie_now_and_after_a_restart(settings: Settings, fake: FakeOllama) -> None:
    configured = settings.replace(admin_password=PASSWORD)
    async with console_client(configured, fake) as client:
        cookie, token = await logged_in_cookie(client)
        client.cookies.clear()
        other_cookie, other_token = await logged_in_cookie(client)  # a second browser stays logged in
        client.cookies.clear()
        client.cookies.set(COOKIE, cookie)
        out = await client.post("/admin/logout", headers={"X-CSRF-Token": token}, follow_redirects=False)
        assert out.status_code == 303
        await assert_refused(client, cookie, token)
        client.cookies.set(COOKIE, other_cookie)
        assert (await client.get("/admin/", follow_redirects=False)).status_code == 200
        assert (await client.post("/rag/documents", json=DOC, headers={"X-CSRF-Token": other_token})).status_code == 202
    mode = stat.S_IMODE(os.stat(settings.data_dir / REVOKED_FILE).st_mode)
    assert mode == 0o600
    async with console_client(configured, fake) as client:  # a new process over the same data dir
        await assert_refused(client, cookie, token)
        client.cookies.set(COOKIE, other_cookie)
        assert (await client.get("/admin/", follow_redirects=False)).status_code == 200
        # and a fresh login works as ever
        client.cookies.clear()
        assert (await log_in(client)).status_code == 303
        assert (await client.get("/admin/", follow_redirects=False)).status_code == 200


@pytest.mark.anyio
async def test_a_password_change_ends_every_session(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        cookie, token = await logged_in_cookie(client)
    async with console_client(settings.replace(admin_password="a new password"), fake) as client:
        await assert_refused(client, cookie, token)
        assert (await log_in(client, "a new password")).status_code == 303


def test_revocations_age_out_of_the_file(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / REVOKED_FILE).write_text("old-sid 1000\nlive-sid 99999999999\ntorn-li")
    assert set(Auth(settings.replace(admin_password=PASSWORD)).revoked.ids) == {"live-sid"}
    assert (settings.data_dir / REVOKED_FILE).read_text() == "live-sid 99999999999\n"
