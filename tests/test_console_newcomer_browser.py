"""What a newcomer sees of the console in a real headless browser (Debian's chromium driven by
Playwright, launched by tests/test_console_browser.py's helper), at 1366 and 390 pixels wide
(issue 30, items 7 to 10): every page fits the screen with real data loaded (a wide table scrolls
inside its own box, the settings wrap), graph labels are readable at the size they are drawn, the
login page offers no page it cannot open, every error page is styled with a way back, a name typed
into the address finds its entity, and a delete says it was done. The in-process side is
tests/test_console_newcomer.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import FilePayload, Page, expect

from admin.rendering import ref
from proxy.app import Settings, create_app
from tests import test_console_browser
from tests.corpus import CITY, CLUB, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.test_console_browser import PASSWORD, Watcher, _nav, browser_page

WIDTHS = (1366, 390)
# a long value: what pushed the settings table's last two columns 1,100 px off screen
CORS = ",".join(f"https://team-{i}.intranet.example-corporation.com" for i in range(24))
ORBANEX = "Orbanex Labs employs Bob Jones. Orbanex Labs sells rockets."
BACKGROUND = "rgb(247, 247, 245)"   # the stylesheet's --bg: the page is styled
MIN_LABEL_PX = 12

# what sticks out of the screen: the page scrolling sideways, or any element outside a box that
# scrolls on its own (.scroll, .graph-frame), or such a box itself
OVERFLOW = """() => {
  const width = window.innerWidth;
  const out = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ').join('.') : '');
  if (document.documentElement.scrollWidth > width) out.push('the page scrolls sideways: ' +
    document.documentElement.scrollWidth + ' > ' + width);
  for (const el of document.querySelectorAll('body *')) {
    const inner = el.parentElement && el.parentElement.closest('.scroll, .graph-frame');
    if (inner) continue;
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 0.5) out.push(name(el) + ' ends at ' + Math.round(box.right));
  }
  return out;
}"""
LABEL_SIZES = """() => [...document.querySelectorAll('svg.graph text')].map(
  (t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"""


@pytest.fixture
def newcomer_url(settings: Settings, fake: FakeOllama, live_upstream: str) -> Iterator[str]:
    fake.structured = KnownFacts({**PEOPLE, "Orbanex Labs": "Organization"})
    loaded = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(settings.data_dir), "GRAPHGATE_KEYWORD_BUDGET": "30",
                                    "GRAPHGATE_CORS_ORIGINS": CORS})
    app = create_app(loaded.replace(upstream=live_upstream, admin_password=PASSWORD))
    with serve_in_thread(app) as url:
        yield url


def fits(page: Page, where: str) -> None:
    offenders = page.evaluate(OVERFLOW)
    assert offenders == [], f"{where} at {page.viewport_size}: {offenders[:8]}"


def styled(page: Page) -> None:
    expect(page.locator("body")).to_have_css("background-color", BACKGROUND)   # once the stylesheet is in
    expect(page.get_by_role("heading", name="Something went wrong")).to_be_visible()


def at(page: Page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})


def log_in(page: Page) -> None:
    page.goto("/admin/login")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/$"))


def test_every_page_fits_the_screen_and_says_what_was_done(newcomer_url: str, fake: FakeOllama) -> None:
    watcher = Watcher(origin=newcomer_url)
    watcher.expected.append(re.compile(r"status of 404 .*/admin/no-such-page"))
    with browser_page(newcomer_url, watcher) as page:
        _login_page_offers_nothing_it_cannot_open(page)
        log_in(page)
        paths = _real_data(page, newcomer_url)
        for width in WIDTHS:
            at(page, width)
            for path in paths:
                page.goto(path)
                fits(page, path)
            _settings_wrap(page)
            _labels_readable(page)
            _playground_fits(page)
        _key_made_and_revoked(page)
        _a_name_typed_into_the_address(page)
        _deletes_say_so(page)


def _login_page_offers_nothing_it_cannot_open(page: Page) -> None:
    for width in WIDTHS:
        at(page, width)
        page.goto("/admin/")
        expect(page).to_have_url(re.compile(r"/admin/login\?next="))
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        expect(page.get_by_role("navigation", name="Console")).to_have_count(0)
        expect(page.get_by_role("button", name="Log out")).to_have_count(0)
        assert page.locator("a[href]").count() == 0, page.locator("a[href]").all_inner_texts()
        fits(page, "the login page")


def _real_data(page: Page, url: str) -> list[str]:
    """Documents, entities, a cache, a chat turn, a second base and a knowledge model, made as a
    user makes them; the console's addresses that show them."""
    _nav(page, "Documents").click()
    expect(page.locator("#document-table")).to_be_visible()
    page.wait_for_load_state("load")   # htmx has taken the form: a click before it posts the plain form
    page.locator("input[type=file][name=files]").set_input_files([
        FilePayload(name="team-minutes-of-the-quarterly-planning-meeting-with-every-department.txt",
                    mimeType="text/plain", buffer=TEAM.encode()),
        FilePayload(name="city.md", mimeType="text/plain", buffer=CITY.encode()),
        FilePayload(name="club.txt", mimeType="text/plain", buffer=CLUB.encode()),
        FilePayload(name="orbanex.txt", mimeType="text/plain", buffer=ORBANEX.encode()),
    ])
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator('#documents tr[data-status="processed"]')).to_have_count(4, timeout=60_000)

    chat = httpx.post(f"{url}/api/chat", json={"model": "llama3.2:latest", "stream": False, "messages": [
        {"role": "user", "content": "Where is Acme Corp based, and who works there? " * 8}]}, timeout=30)
    assert chat.status_code == 200, chat.text

    _nav(page, "Knowledge bases").click()
    form = page.locator("#create-kb")
    form.get_by_label("Name").fill("hr")
    form.get_by_role("button", name="Create the knowledge base").click()
    expect(page.get_by_role("status")).to_have_text("Created the knowledge base “hr”.")

    _nav(page, "Knowledge models").click()
    form = page.locator("#create-model")
    form.get_by_label("Name (as clients will list it)").fill("hr-assistant")
    form.locator("select[name=model]").select_option("llama3.2:latest")
    form.locator("select[name=kb]").select_option("hr")
    form.get_by_label("System prompt").fill("Answer from the handbook only. " * 12)
    form.get_by_role("button", name="Create the knowledge model").click()
    expect(page.get_by_role("status")).to_have_text("Created the knowledge model “hr-assistant:latest”.")

    page.goto("/admin/documents")
    document = page.locator("#documents tbody tr a", has_text="team-minutes").get_attribute("href")
    page.goto("/admin/cache/extract")
    entry = page.locator("#cache-entries tbody tr a").first.get_attribute("href")
    page.goto("/admin/chats")
    for _ in range(40):   # the turn's trace is written in the background
        if page.locator("#chats tbody tr").count():
            break
        page.wait_for_timeout(250)
        page.reload()
    turn = page.locator("#chats tbody tr a").first.get_attribute("href")
    assert document and entry and turn
    acme = f"/admin/entities/{ref('acme corp')}"
    return ["/admin/", "/admin/documents", document, f"{document}/delete", "/admin/entities", acme,
            f"{acme}/delete", "/admin/suggestions", "/admin/graph", f"/admin/graph?entity={ref('acme corp')}&depth=2",
            f"/admin/merge?key={ref('alice smith')}&key={ref('bob jones')}", "/admin/cache", "/admin/cache/extract",
            entry, "/admin/chats", turn, "/admin/kbs", "/admin/kbs/hr", "/admin/models", "/admin/models/hr-assistant",
            "/admin/models/hr-assistant/delete", "/admin/keys", "/admin/settings", "/admin/no-such-page"]


def _settings_wrap(page: Page) -> None:
    page.goto("/admin/settings")
    width = page.evaluate("() => window.innerWidth")
    table = page.locator("#settings").bounding_box()
    assert table and table["x"] >= 0 and table["x"] + table["width"] <= width, (table, width)
    cors = page.locator('tr[data-setting="GRAPHGATE_CORS_ORIGINS"]')
    expect(cors.locator("td.value")).to_contain_text("team-23.intranet.example-corporation.com")
    for cell in cors.locator("td").all():   # all four columns on screen, the long one wrapped
        box = cell.bounding_box()
        assert box and box["x"] + box["width"] <= width, (cell.inner_text()[:60], box, width)
    store = page.locator('tr[data-setting="GRAPHGATE_STORE"]')
    expect(store.locator("td.value")).to_have_text("embedded")
    expect(store.locator("td.source")).to_have_text("default")
    expect(page.locator('tr[data-setting="GRAPHGATE_ADMIN_PASSWORD"] td.value')).to_have_text("(set, hidden)")
    expect(page.locator('tr[data-setting="GRAPHGATE_CORS_ORIGINS"] td.source')).to_have_text("environment")


def _labels_readable(page: Page) -> None:
    for path in (f"/admin/graph?entity={ref('acme corp')}&depth=2", f"/admin/entities/{ref('acme corp')}"):
        page.goto(path)
        sizes = page.evaluate(LABEL_SIZES)
        assert sizes and min(sizes) >= MIN_LABEL_PX, (path, page.viewport_size, sorted(sizes)[:5])
        fits(page, path)
        # the centre entity is in view, however narrow the screen
        centre = page.locator("svg.graph .node.centre circle").bounding_box()
        width = page.evaluate("() => window.innerWidth")
        assert centre and 0 <= centre["x"] and centre["x"] + centre["width"] <= width, (path, centre, width)


def _playground_fits(page: Page) -> None:
    page.goto("/admin/playground")
    page.locator("textarea[name=query]").fill("Who works at Acme Corp, and where is it based?")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#playground-result #result-entities")).to_be_visible()
    fits(page, "the playground's result")


def _key_made_and_revoked(page: Page) -> None:
    at(page, 390)
    _nav(page, "Keys").click()
    page.get_by_label("Name").fill("laptop-of-the-finance-department")
    page.get_by_role("button", name="Create the key").click()
    expect(page.locator("#new-token")).to_be_visible()
    fits(page, "a new key's page")
    page.goto("/admin/keys")
    page.locator('#key-table a[href$="/revoke"]').first.click()
    page.get_by_role("button", name="Revoke the key").click()
    expect(page).to_have_url(re.compile(r"/admin/keys$"))
    expect(page.get_by_role("status")).to_contain_text("Revoked the key “laptop-of-the-finance-department”")


def _a_name_typed_into_the_address(page: Page) -> None:
    page.goto("/admin/entities/Orbanex%20Labs")
    expect(page).to_have_url(re.compile(re.escape(f"/admin/entities/{ref('orbanex labs')}") + "$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Orbanex Labs")
    page.goto("/admin/entities/orbanex")
    expect(page).to_have_url(re.compile(r"/admin/entities\?q=orbanex$"))
    expect(page.get_by_label("Search by name")).to_have_value("orbanex")
    expect(page.locator("#entities").get_by_role("link", name="Orbanex Labs")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("No entity is named “orbanex”")


def _deletes_say_so(page: Page) -> None:
    _nav(page, "Documents").click()
    page.locator("#documents").get_by_role("link", name="club.txt").click()
    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete the document").click()
    expect(page).to_have_url(re.compile(r"/admin/documents$"))
    done = page.get_by_role("status")
    expect(done).to_contain_text("Deleted the document “club.txt” (1 chunk, ")
    expect(done).to_be_visible()
    page.reload()
    expect(page.locator("#done")).to_have_count(0)   # said once

    page.goto(f"/admin/entities/{ref('orion')}")
    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete the entity").click()
    expect(page).to_have_url(re.compile(r"/admin/entities$"))
    expect(page.get_by_role("status")).to_contain_text("Deleted the entity “Orion” and its ")

    _nav(page, "Cache").click()
    page.locator('tr[data-kind="extract"]').get_by_role("link", name="Clear…").click()
    page.get_by_role("button", name=re.compile(r"^Clear \d+ extraction entr")).click()
    expect(page).to_have_url(re.compile(r"/admin/cache$"))
    expect(page.get_by_role("status")).to_contain_text("Cleared the extraction cache")


class RenamedHosts(Watcher):
    """The page also goes to the gateway under a name it refuses, and to localhost (its way back)."""

    def __init__(self, origin: str) -> None:
        super().__init__(origin=origin)
        port = urlsplit(origin).port
        self.also = (f"http://rebound.test:{port}/", f"http://localhost:{port}/")

    def foreign(self) -> list[str]:
        return [u for u in super().foreign() if not u.startswith(self.also)]


def _submit(page: Page, action: str, fields: dict[str, str]) -> None:
    """A form posted as a browser posts it (what the login page's old "Log out" did, or a stale tab)."""
    page.evaluate("""([action, fields]) => {
      const form = document.createElement('form');
      form.method = 'post';
      form.action = action;
      for (const [name, value] of Object.entries(fields)) {
        const field = document.createElement('textarea');
        field.name = name;
        field.value = value;
        form.append(field);
      }
      document.body.append(form);
      form.submit();
    }""", [action, fields])


def test_every_console_error_is_a_styled_page_with_a_way_back(newcomer_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    port = urlsplit(newcomer_url).port
    # chromium reaches the gateway under a name its Host check refuses (a DNS-rebinding page would)
    monkeypatch.setattr(test_console_browser, "CHROMIUM_ARGS",
                        [*test_console_browser.CHROMIUM_ARGS, "--host-resolver-rules=MAP rebound.test 127.0.0.1"])
    watcher = RenamedHosts(newcomer_url)
    watcher.expected.append(re.compile(r"status of (401|403|404|405|413) "))
    with browser_page(newcomer_url, watcher) as page:
        at(page, 390)
        page.goto("/admin/login")
        _submit(page, "/admin/logout", {})   # a form sent without a login: 401
        expect(page.get_by_role("alert")).to_contain_text("401 Unauthorized")
        styled(page)
        fits(page, "the 401 page")
        page.locator("#way-back").click()
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()

        log_in(page)
        at(page, 1366)
        for path, status in (("/admin/no-such-page", "404 Not Found"), ("/admin/logout", "405 Method Not Allowed")):
            page.goto(path)
            expect(page.get_by_role("alert")).to_contain_text(status)
            styled(page)
            expect(page.get_by_role("navigation", name="Console")).to_be_visible()
            page.locator("#way-back").click()
            expect(page).to_have_url(re.compile(r"/admin/$"))

        page.goto("/admin/kbs")
        _submit(page, "/admin/kbs", {"name": "no-token"})   # no CSRF token: 403
        expect(page.get_by_role("alert")).to_contain_text("403 Forbidden")
        styled(page)
        page.goto("/admin/kbs")
        _submit(page, "/admin/kbs", {"name": "x" * 1_100_000})   # past a console form's bound: 413
        expect(page.get_by_role("alert")).to_contain_text("413")
        styled(page)
        page.locator("#way-back").click()
        expect(page).to_have_url(re.compile(r"/admin/$"))

        # under a name the Host check refuses: the page carries its style, and leads to localhost
        page.goto(f"http://rebound.test:{port}/admin/")
        expect(page.get_by_role("alert")).to_contain_text("403 Forbidden")
        styled(page)
        expect(page.locator("#way-back")).to_have_text("Open the console as localhost")
        page.locator("#way-back").click()
        expect(page).to_have_url(re.compile(rf"^http://localhost:{port}/admin/login"))
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
