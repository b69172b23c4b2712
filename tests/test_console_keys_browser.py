"""The console's Keys page in a real headless browser (Debian's chromium, as tests/test_console_browser.py):
log in, make a key limited to one base with the form (htmx, no reload), see its token once, use it,
then revoke it after the confirmation; the page logs no error and talks to nothing but the gateway."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from proxy.app import Settings, create_app
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.test_console_browser import PASSWORD, Watcher, _log_in, _nav, _no_reload_marker, _same_page, browser_page

ADMIN_KEY = "browser-admin-key"


@pytest.fixture
def keys_url(settings: Settings, fake: FakeOllama, live_upstream: str) -> Iterator[str]:
    app = create_app(settings.replace(upstream=live_upstream, admin_password=PASSWORD, api_key=ADMIN_KEY))
    with serve_in_thread(app) as url:
        for name in ("hr", "eng"):
            response = httpx.post(f"{url}/rag/kbs", json={"name": name},
                                  headers={"authorization": f"Bearer {ADMIN_KEY}"}, trust_env=False)
            assert response.status_code == 201, response.text
        yield url


def test_make_use_and_revoke_a_key_in_a_real_browser(keys_url: str) -> None:
    watcher = Watcher(origin=keys_url)
    with browser_page(keys_url, watcher) as page:
        _log_in(page, watcher)
        _nav(page, "Keys").click()
        expect(page).to_have_url(re.compile(r"/admin/keys$"))
        expect(page.locator("#key-table")).to_contain_text("No keys yet")
        _no_reload_marker(page)

        page.get_by_label("Name").fill("hr bot")
        page.get_by_label("Role").select_option("write")
        page.get_by_label("hr", exact=True).check()
        page.get_by_role("button", name="Create the key").click()
        token_box = page.locator("#new-token")
        expect(token_box).to_have_value(re.compile(r"^gg_[0-9a-f]{12}_"))
        expect(page.locator("#new-key")).to_contain_text("Copy it now: it is not shown again.")
        assert _same_page(page), "the form reloaded the page instead of swapping it"
        token = token_box.input_value()
        row = page.locator("#key-table tbody tr", has_text="hr bot")
        expect(row).to_contain_text("write")
        expect(row).to_contain_text(token[:20])

        auth = {"authorization": f"Bearer {token}"}
        assert httpx.get(f"{keys_url}/rag/documents", params={"kb": "hr"}, headers=auth).status_code == 200
        assert httpx.get(f"{keys_url}/rag/documents", params={"kb": "eng"}, headers=auth).status_code == 404

        page.get_by_role("link", name="Done").click()
        expect(page.locator("#new-token")).to_have_count(0)
        assert token not in page.content()
        page.locator("#key-table tbody tr", has_text="hr bot").get_by_role("link", name="Revoke…").click()
        expect(page.get_by_role("heading", name="Revoke “hr bot”?")).to_be_visible()
        page.get_by_role("button", name="Revoke the key").click()
        expect(page).to_have_url(re.compile(r"/admin/keys$"))
        expect(page.locator("#key-table")).to_contain_text("No keys yet")
        assert httpx.get(f"{keys_url}/rag/documents", params={"kb": "hr"}, headers=auth).status_code == 401
