"""The console's Keys page (admin/routes_keys.py, templates/keys.html) in-process: the list, a key
made with the form (its token shown once, then never again, and working at once within its
scope), bad input shown on the form with nothing stored, CSRF, and revocation after a confirmation."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from proxy.app import Settings
from proxy.control.keys import KEYS_FILE
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.console_helpers import post, token
from tests.fake_ollama import FakeOllama
from tests.matching import must_find

pytestmark = pytest.mark.anyio


def stored_keys(settings: Settings) -> list[dict]:
    path = settings.data_dir / KEYS_FILE
    return json.loads(path.read_text())["keys"] if path.exists() else []


async def with_bases(client: httpx.AsyncClient, *names: str) -> None:
    for name in names:
        assert (await client.post("/rag/kbs", json={"name": name})).status_code == 201


async def log_in_with_key(client: httpx.AsyncClient, key: str) -> None:
    """The password-less console once a key is in use: a login with an admin key of every base."""
    page = await client.get("/admin/login")
    csrf = must_find(r'name="csrf" value="([^"]+)"', page.text).group(1)
    assert (await client.post("/admin/login", data={"csrf": csrf, "key": key})).status_code == 303


async def test_a_key_made_in_the_console_is_shown_once_and_works_within_its_scope(
        settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings, fake) as client:   # loopback, no password: the console is open
        await with_bases(client, "hr", "eng")
        page = await client.get("/admin/keys")
        assert page.status_code == 200
        assert '<a href="/admin/keys" aria-current="page">Keys</a>' in page.text
        assert "No keys yet" in page.text
        for kb in ("default", "hr", "eng"):
            assert f'name="kb" value="{kb}"' in page.text
        # the first key closes the password-less console to loopback clients (issue 29, item 4), as the
        # page says: an admin key of every base first, to log in with
        assert 'id="closes-console"' in page.text
        owner = await post(client, "/admin/keys", {"name": "owner", "role": "admin"})
        assert owner.status_code == 201, owner.text[:500]
        closed = await client.get("/admin/keys")
        assert closed.status_code == 303 and closed.headers["location"].startswith("/admin/login")
        await log_in_with_key(client, must_find(r'id="new-token" readonly value="(gg_[^"]+)"', owner.text).group(1))

        made = await post(client, "/admin/keys", {"name": "hr bot", "role": "read", "kb": "hr"})
        assert made.status_code == 201, made.text[:500]
        secret = must_find(r'id="new-token" readonly value="(gg_[^"]+)"', made.text).group(1)
        assert "it is not shown again" in made.text
        assert made.headers["cache-control"] == "no-store"
        assert secret not in json.dumps(stored_keys(settings))
        [stored] = [key for key in stored_keys(settings) if key["name"] == "hr bot"]
        assert stored["name"] == "hr bot" and stored["role"] == "read" and stored["kbs"] == ["hr"]

        listing = (await client.get("/admin/keys")).text
        assert secret not in listing and stored["prefix"] in listing and "hr bot" in listing
        assert "No keys yet" not in listing

        # the key works at once, and only on hr
        auth = {"authorization": f"Bearer {secret}"}
        assert (await client.get("/rag/documents", params={"kb": "hr"}, headers=auth)).status_code == 200
        assert (await client.get("/rag/documents", params={"kb": "eng"}, headers=auth)).status_code == 404
        assert (await client.get("/rag/documents", params={"kb": "hr"})).status_code == 401   # the API is closed now
        # the console (logged in with the owner key) stays the admin of every base; loopback alone is not
        assert (await client.get("/admin/keys")).status_code == 200
        client.cookies.clear()
        assert (await client.get("/admin/keys")).status_code == 303


async def test_bad_input_is_shown_on_the_form_and_stores_nothing(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings, fake) as client:
        await with_bases(client, "hr")
        for form, named in (({"name": "k", "role": "owner"}, "role"),
                            ({"name": "", "role": "read"}, "name"),
                            ({"name": "x" * 65, "role": "read"}, "name"),
                            ({"name": "typo", "role": "write", "kb": "hr-typo"}, "hr-typo")):
            response = await post(client, "/admin/keys", form)
            assert response.status_code == 400, (form, response.text[:300])
            error = must_find(r'id="key-error">([^<]+)<', response.text).group(1)
            assert named in error, (form, error)
        assert 'value="typo"' in response.text   # the form comes back filled in
        assert stored_keys(settings) == []
        # without the CSRF token: refused, nothing stored
        refused = await post(client, "/admin/keys", {"name": "k", "role": "read"}, csrf=False)
        assert refused.status_code == 403 and stored_keys(settings) == []


async def test_revoking_a_key_after_confirmation(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings, fake) as client:
        # a stored key closes the password-less console to loopback clients: it takes an admin key then
        owner = await client.post("/rag/keys", json={"name": "owner", "role": "admin"})
        await log_in_with_key(client, owner.json()["token"])
        made = await post(client, "/admin/keys", {"name": "laptop", "role": "admin"}, htmx=True)
        assert made.status_code == 201 and 'id="keys-page"' in made.text
        secret = must_find(r'id="new-token" readonly value="(gg_[^"]+)"', made.text).group(1)
        key_id = stored_keys(settings)[1]["id"]
        assert (await post(client, "/admin/keys", {"name": "ci", "role": "read"})).status_code == 201
        auth = {"authorization": f"Bearer {secret}"}
        assert (await client.get("/rag/kbs", headers=auth)).status_code == 200

        assert "<td>laptop</td>" in (await client.get("/admin/keys")).text
        confirm = await client.get(f"/admin/keys/{key_id}/revoke")
        assert confirm.status_code == 200 and "Revoke “laptop”?" in confirm.text
        assert f'action="/admin/keys/{key_id}/revoke"' in confirm.text
        assert (await post(client, f"/admin/keys/{key_id}/revoke", csrf=False)).status_code == 403
        assert (await client.get("/rag/kbs", headers=auth)).status_code == 200   # still there

        gone = await post(client, f"/admin/keys/{key_id}/revoke")
        assert gone.status_code == 303 and gone.headers["location"] == "/admin/keys"
        assert (await client.get("/rag/kbs", headers=auth)).status_code == 401   # at once
        assert [k["name"] for k in stored_keys(settings)] == ["owner", "ci"]
        assert "<td>laptop</td>" not in (await client.get("/admin/keys")).text
        assert (await client.get(f"/admin/keys/{key_id}/revoke")).status_code == 404
        assert (await post(client, f"/admin/keys/{key_id}/revoke")).status_code == 404


async def test_a_stored_key_does_not_open_the_console(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        await log_in(client)
        made = await post(client, "/admin/keys", {"name": "owner", "role": "admin"})
        secret = must_find(r'id="new-token" readonly value="(gg_[^"]+)"', made.text).group(1)
        await client.post("/admin/logout", data={"csrf": await token(client)})
        client.cookies.clear()
        page = await client.get("/admin/keys", headers={"authorization": f"Bearer {secret}"})
        assert page.status_code == 303 and "/admin/login" in page.headers["location"]
        assert re.search(r"gg_", page.text) is None
