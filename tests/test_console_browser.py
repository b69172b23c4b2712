"""The console end to end in a real headless browser (Debian's chromium driven by Playwright).

One journey through a real uvicorn in front of the fake model on a real uvicorn: log in, upload
two files, watch them reach "processed" live, search an entity as you type, merge two entities
through the preview, inspect and clear a cache kind, run the playground and stream an answer.
Along the way the page must log no console error and raise no uncaught error (CSP violations and
htmx errors show up there), and must talk to nothing but the gateway.

Playwright's own browser download is never used: CI installs chromium (``.ci/run``), so a missing
``/usr/bin/chromium`` fails the test rather than skipping it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import (
    ConsoleMessage,
    FilePayload,
    Locator,
    Page,
    Request,
    expect,
    sync_playwright,
)

from proxy.app import Settings, create_app
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
PASSWORD = "browser-test-password"
TIMEOUT_MS = 15_000
ANSWER = ["Acme Corp ", "is based ", "in Berlin, ", "says the fake model."]

# Records, in the page, every status the documents table shows (without a reload the record
# survives: it lives in the page's window) and every text the streamed answer passes through.
WATCH = """() => {
  window.__journey = {statuses: [], answers: []};
  const seen = () => {
    const rows = [...document.querySelectorAll("#documents tr[data-status]")];
    const statuses = rows.map((r) => r.dataset.status).sort().join(",");
    const log = window.__journey.statuses;
    if (statuses && log[log.length - 1] !== statuses) log.push(statuses);
    const answer = document.querySelector("#answer-stream .answer");
    const text = answer ? answer.textContent : "";
    const said = window.__journey.answers;
    if (text && said[said.length - 1] !== text) said.push(text);
  };
  new MutationObserver(seen).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                      characterData: true});
  seen();
}"""


@dataclass
class Watcher:
    """What the page reported: console errors, uncaught errors, and every request it made."""
    origin: str
    errors: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        where = message.location.get("url", "") if message.location else ""
        text = f"console error: {message.text} (at {where})"
        if any(p.search(text) for p in self.expected):
            return
        self.errors.append(text)

    def page_error(self, error: Exception) -> None:
        self.errors.append(f"uncaught page error: {error}")

    def request(self, request: Request) -> None:
        self.requests.append(request.url)

    def foreign(self) -> list[str]:
        return [u for u in self.requests if not u.startswith((self.origin + "/", "data:"))]


@pytest.fixture
def console_url(settings: Settings, fake: FakeOllama, facts: KnownFacts, live_upstream: str) -> Iterator[str]:
    app = create_app(settings.replace(upstream=live_upstream, admin_password=PASSWORD))
    with serve_in_thread(app) as url:
        yield url


def _nav(page: Page, section: str) -> Locator:
    return page.get_by_role("navigation", name="Console").get_by_role("link", name=section, exact=True)


def _no_reload_marker(page: Page) -> None:
    page.evaluate("() => { window.__same_page = true; }")


def _same_page(page: Page) -> bool:
    return page.evaluate("() => window.__same_page === true")


@contextmanager
def browser_page(origin: str, watcher: Watcher) -> Iterator[Page]:
    """A page of Debian's chromium on ``origin``, every console message, page error and request
    reported to ``watcher``; afterwards, no error and no request beyond the gateway."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the console's browser tests drive Debian's chromium "
                    "(apt-get install chromium; .ci/run installs it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(base_url=origin)
            context.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)
            page = context.new_page()
            page.on("console", watcher.console)
            page.on("pageerror", watcher.page_error)
            page.on("request", watcher.request)
            try:
                yield page
            except Exception as exc:  # what the page reported is usually the cause: say it first
                if watcher.errors:
                    raise AssertionError("the journey failed; the page reported:\n" + "\n".join(watcher.errors)) \
                        from exc
                raise
        finally:
            browser.close()
    assert watcher.errors == [], "\n".join(watcher.errors)
    assert watcher.foreign() == [], f"the page talked to something other than the gateway: {watcher.foreign()}"


def test_console_journey_in_a_real_browser(console_url: str, fake: FakeOllama) -> None:
    watcher = Watcher(origin=console_url)
    with browser_page(console_url, watcher) as page:
        _journey(page, fake, watcher)


def _journey(page: Page, fake: FakeOllama, watcher: Watcher) -> None:
    _log_in(page, watcher)
    _upload_and_watch(page, fake)
    _search_as_you_type(page)
    _merge(page)
    _cache(page)
    _playground(page, fake)


def _log_in(page: Page, watcher: Watcher) -> None:
    page.goto("/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login\?next=%2Fadmin%2F$"))
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()

    # the wrong password is answered 401 on purpose; chromium logs that as a failed resource load
    watcher.expected.append(re.compile(r"status of 401.*/admin/login"))
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page.get_by_role("alert")).to_have_text("Wrong password.")
    expect(page).to_have_url(re.compile(r"/admin/login$"))

    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/$"))
    expect(_nav(page, "Dashboard")).to_have_attribute("aria-current", "page")
    expect(page.get_by_role("button", name="Log out", exact=True)).to_be_visible()
    watcher.expected.clear()  # from here on, any failed load is a bug


def _upload_and_watch(page: Page, fake: FakeOllama) -> None:
    # a model that thinks a little: the browser gets to see the documents before they are processed
    fake.reply_delay = 0.6
    _nav(page, "Documents").click()
    expect(page).to_have_url(re.compile(r"/admin/documents$"))
    expect(page.locator("#document-table")).to_contain_text("No documents yet")
    page.wait_for_load_state("load")   # htmx has taken the form: a click before it posts the plain form
    page.evaluate(WATCH)
    _no_reload_marker(page)

    page.locator("input[type=file][name=files]").set_input_files([
        FilePayload(name="team.txt", mimeType="text/plain", buffer=TEAM.encode()),
        FilePayload(name="city.md", mimeType="text/plain", buffer=CITY.encode()),
    ])
    page.get_by_role("button", name="Upload", exact=True).click()

    results = page.locator("#upload-results li")
    expect(results).to_have_count(2)
    expect(results.filter(has_text="team.txt").locator(".badge")).to_have_text("accepted")
    expect(results.filter(has_text="city.md").locator(".badge")).to_have_text("accepted")

    rows = page.locator("#documents tbody tr")
    expect(rows).to_have_count(2)
    # the table keeps itself up to date (it polls while something is pending or processing)
    expect(page.locator('#documents tr[data-status="processed"]')).to_have_count(2, timeout=30_000)
    expect(rows.filter(has_text="team.txt").locator(".badge")).to_have_text("processed")
    expect(rows.filter(has_text="city.md").locator(".badge")).to_have_text("processed")
    expect(page.locator("#document-table [hx-trigger]")).to_have_count(0)  # done: the polling stopped

    statuses = page.evaluate("() => window.__journey.statuses")
    assert _same_page(page), "the documents page reloaded instead of updating itself"
    assert statuses[-1] == "processed,processed", statuses
    assert any(s != "processed,processed" for s in statuses[:-1]), \
        f"the browser never saw a document before it was processed: {statuses}"
    assert page.url.endswith("/admin/documents")
    fake.reply_delay = 0.0


def _search_as_you_type(page: Page) -> None:
    _nav(page, "Entities").click()
    expect(page).to_have_url(re.compile(r"/admin/entities$"))
    table = page.locator("#entity-table")
    expect(table).to_contain_text("Alice Smith")
    expect(table).to_contain_text("Bob Jones")
    _no_reload_marker(page)

    page.get_by_label("Search by name").press_sequentially("ali")
    expect(page).to_have_url(re.compile(r"/admin/entities\?q=ali"))  # pushed by htmx, not loaded
    expect(table.get_by_role("link", name="Alice Smith")).to_be_visible()
    expect(table).not_to_contain_text("Bob Jones")
    expect(page.locator("#entities tbody tr")).to_have_count(1)
    assert _same_page(page), "searching reloaded the page"


def _merge(page: Page) -> None:
    page.goto("/admin/entities")
    page.get_by_label("Select Orion").check()
    page.get_by_label("Select Acme Corp").check()
    page.get_by_role("button", name="Merge selected…", exact=True).click()

    expect(page).to_have_url(re.compile(r"/admin/merge\?"))
    picked = page.locator("#picked tbody tr")
    expect(picked).to_have_count(2)
    expect(page.locator("#picked")).to_contain_text("Orion")
    expect(page.locator("#picked")).to_contain_text("Acme Corp")
    page.get_by_label("Keep Acme Corp").check()
    _no_reload_marker(page)
    page.get_by_role("button", name="Preview the merge", exact=True).click()

    preview = page.locator("#merge-preview")
    expect(preview).to_be_visible()
    assert _same_page(page), "the preview reloaded the page"
    expect(preview.locator("dd strong")).to_have_text("Acme Corp")
    expect(preview).to_contain_text("1 self-loop dropped")
    expect(preview).to_contain_text("Relations afterwards (3)")
    relations = preview.locator("tbody tr")
    expect(relations).to_have_count(3)
    pairs = sorted(" – ".join(sorted(relations.nth(i).locator("td").nth(j).inner_text() for j in (0, 1)))
                   for i in range(3))
    assert pairs == ["Acme Corp – Alice Smith", "Acme Corp – Berlin", "Acme Corp – Bob Jones"], pairs

    page.locator("#confirm-merge").click()
    expect(page).to_have_url(re.compile(r"/admin/entities/[^/?]+$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Acme Corp")
    expect(page.locator("#relations")).to_contain_text("Alice Smith")  # Orion's relation came along

    page.get_by_role("link", name="← Entities").click()
    expect(page).to_have_url(re.compile(r"/admin/entities$"))
    table = page.locator("#entities")
    expect(table.get_by_role("link", name="Acme Corp", exact=True)).to_be_visible()
    expect(table.locator('tr[data-key="orion"]')).to_have_count(0)
    expect(table.get_by_role("link", name="Orion", exact=True)).to_have_count(0)


def _cache(page: Page) -> None:
    _nav(page, "Cache").click()
    expect(page).to_have_url(re.compile(r"/admin/cache$"))
    count = page.locator('tr[data-kind="extract"] td[data-count]')
    expect(count).not_to_have_attribute("data-count", "0")
    entries = int(count.get_attribute("data-count") or 0)
    assert entries >= 2, entries  # one extraction per chunk at least, two documents

    page.get_by_role("link", name="extraction", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/cache/extract$"))
    expect(page.locator("#cache-entries tbody tr")).to_have_count(entries)
    page.locator("#cache-entries tbody tr a").first.click()

    expect(page).to_have_url(re.compile(r"/admin/cache/extract/[^/]+$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Extraction cache entry")
    expect(page.locator("#cache-request")).to_contain_text('"messages"')
    expect(page.locator("#cache-response")).to_contain_text('"entities"')

    page.go_back()
    expect(page).to_have_url(re.compile(r"/admin/cache/extract$"))
    page.get_by_role("link", name="Clear all extraction entries…").click()
    expect(page).to_have_url(re.compile(r"/admin/cache/extract/clear$"))
    expect(page.locator("#clear-count")).to_have_text(str(entries))
    page.get_by_role("button", name=f"Clear {entries} extraction entries", exact=True).click()

    expect(page).to_have_url(re.compile(r"/admin/cache$"))
    expect(page.locator('tr[data-kind="extract"] td[data-count]')).to_have_attribute("data-count", "0")
    expect(page.locator('tr[data-kind="extract"]').get_by_role("link", name="Clear…")).to_have_count(0)


def _playground(page: Page, fake: FakeOllama) -> None:
    _nav(page, "Playground").click()
    expect(page).to_have_url(re.compile(r"/admin/playground$"))
    page.evaluate(WATCH)
    _no_reload_marker(page)

    page.locator("textarea[name=query]").fill("Where is Acme Corp based?")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.locator("#playground-result")
    expect(result).to_be_visible()
    expect(page.locator("#result-entities")).to_contain_text("Acme Corp")
    expect(page.locator("#context")).to_contain_text("Berlin")
    expect(page.locator("#timings tbody tr").first).to_be_visible()
    expect(page.locator("#timings tbody")).not_to_contain_text("none")
    expect(page.locator("#stages #channels tr[data-channel=chunks]")).to_be_visible()  # the stages panel
    expect(result.locator("dt:text-is('Low-level') + dd")).to_have_text("Acme Corp")  # the query's keywords
    expect(result.locator(".answer-final, #answer-stream")).to_have_count(0)  # no answer asked for

    fake.reply = list(ANSWER)
    fake.chunk_delay = 0.15  # the pieces arrive one by one
    page.get_by_label("Generate the answer").check()
    page.get_by_role("button", name="Run", exact=True).click()
    final = page.locator("#playground-result .answer-final .answer")
    expect(final).to_have_text("".join(ANSWER))
    expect(page.locator("#answer-stream")).to_have_count(0)  # the stream's container gave way: closed
    expect(page.locator("#context")).to_contain_text("Berlin")
    assert _same_page(page), "the playground reloaded the page"
    answers = page.evaluate("() => window.__journey.answers")
    assert answers and "".join(ANSWER).startswith(answers[0]) and answers[0] != "".join(ANSWER), \
        f"the answer did not arrive piece by piece: {answers}"
    chats = [r for r in fake.requests_to("/api/chat") if r.json and r.json.get("stream") and not r.json.get("format")]
    assert chats and "Berlin" in str(chats[-1].json["messages"]), "the answer was not given the context"
