"""The console's knowledge bases in a real headless browser (Debian's chromium driven by Playwright,
as tests/test_console_browser.py): create a base, switch to it, upload a document there and watch it
processed, see it on that base only, delete the base by typing its name. The page must log no error
and talk to nothing but the gateway."""

from __future__ import annotations

import re

from playwright.sync_api import FilePayload, Page, expect

from tests.corpus import TEAM
from tests.test_console_browser import PASSWORD, Watcher, _nav, browser_page, console_url

__all__ = ["console_url"]   # the fixture: a real uvicorn in front of the fake model


def test_a_knowledge_base_from_creation_to_deletion_in_a_real_browser(console_url: str) -> None:
    watcher = Watcher(origin=console_url)
    with browser_page(console_url, watcher) as page:
        _log_in(page)
        _create(page)
        _switch(page, "hr", r"/admin/kbs\?kb=hr$")
        _upload(page)
        _switch(page, "default", r"/admin/documents$")
        expect(page.locator("#document-table")).to_contain_text("No documents yet")
        _switch(page, "hr", r"/admin/documents\?kb=hr$")
        expect(page.locator("#documents")).to_contain_text("handbook.txt")
        _delete(page, watcher)


def _switcher(page: Page):
    return page.get_by_role("combobox", name="Knowledge base", exact=True)


def _switch(page: Page, name: str, url: str) -> None:
    # console.js submits the switcher when a base is picked: once the page has run it (on a busy
    # machine a pick can come before the deferred script, and only the Switch button would then work)
    page.wait_for_load_state("load")
    _switcher(page).select_option(name)
    expect(page).to_have_url(re.compile(url))
    expect(_switcher(page)).to_have_value(name)


def _log_in(page: Page) -> None:
    page.goto("/admin/")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(_switcher(page)).to_have_count(0)   # the login page names no base
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/$"))
    expect(_switcher(page)).to_have_value("default")


def _create(page: Page) -> None:
    _nav(page, "Knowledge bases").click()
    expect(page).to_have_url(re.compile(r"/admin/kbs$"))
    form = page.locator("#create-kb")
    form.get_by_label("Name").fill("hr")
    form.get_by_label("Setting").first.select_option("language")
    form.get_by_label("Value").first.fill("German")
    form.get_by_role("button", name="Create the knowledge base").click()
    expect(page).to_have_url(re.compile(r"/admin/kbs/hr$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Knowledge base “hr”")
    expect(page.locator('#overrides tr[data-setting="language"]')).to_contain_text("German")
    expect(page.locator('#overrides tr[data-setting="language"]')).to_contain_text("this base")
    # the new base is offered by the switcher, but this page is still on default
    expect(_switcher(page).locator("option")).to_have_text(["default", "hr"])
    expect(_switcher(page)).to_have_value("default")


def _upload(page: Page) -> None:
    _nav(page, "Documents").click()
    expect(page).to_have_url(re.compile(r"/admin/documents\?kb=hr$"))
    expect(page.locator("#document-table")).to_contain_text("No documents yet")
    page.wait_for_load_state("load")   # htmx has taken the form: a click before it posts the plain form
    page.locator("input[type=file][name=files]").set_input_files([
        FilePayload(name="handbook.txt", mimeType="text/plain", buffer=TEAM.encode())])
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("#upload-results li .badge")).to_have_text("accepted")
    expect(page.locator('#documents tr[data-status="processed"]')).to_have_count(1, timeout=30_000)
    page.locator("#documents").get_by_role("link", name="handbook.txt").click()
    expect(page).to_have_url(re.compile(r"/admin/documents/[^/?]+\?kb=hr$"))
    page.get_by_role("link", name="← Documents").click()
    expect(page).to_have_url(re.compile(r"/admin/documents\?kb=hr$"))
    expect(page.locator("#documents")).to_contain_text("handbook.txt")


def _delete(page: Page, watcher: Watcher) -> None:
    _nav(page, "Knowledge bases").click()
    expect(page).to_have_url(re.compile(r"/admin/kbs\?kb=hr$"))
    page.locator("#kbs").get_by_role("link", name="hr", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/kbs/hr\?kb=hr$"))
    # the wrong name is answered 400 on purpose; chromium logs that as a failed resource load
    watcher.expected.append(re.compile(r"status of 400.*/admin/kbs/hr/delete"))
    page.get_by_label("Type hr to confirm").fill("HR")
    page.get_by_role("button", name="Delete the knowledge base").click()
    expect(page.locator("#delete-kb [role=alert]")).to_contain_text("nothing was deleted")
    watcher.expected.clear()
    page.get_by_label("Type hr to confirm").fill("hr")
    page.get_by_role("button", name="Delete the knowledge base").click()
    expect(page).to_have_url(re.compile(r"/admin/kbs$"))   # back on default: hr is gone
    expect(page.locator("#kbs tbody tr")).to_have_count(1)
    expect(_switcher(page).locator("option")).to_have_text(["default"])
