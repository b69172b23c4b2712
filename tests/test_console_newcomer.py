"""What a newcomer meets in the console, in-process (issue 30, items 7 to 10): a truthful settings page,
a login page that offers no page it cannot open, every error a styled page with a way back, an entity
found by the name typed into the address, counts that agree with their nouns, readable graph labels
and a confirmation after every delete. The browser's side (layout, widths, what is seen) is in
tests/test_console_newcomer_browser.py. Real engines; the scripted model."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.requests import Request

from admin.graph_svg import FONT_SIZE, Node, render_svg
from admin.rendering import counted, noun
from proxy.app import create_app, on_graphgate_error, on_unexpected
from proxy.core.errors import ServiceUnavailable
from proxy.core.settings import Settings
from proxy.core.settings_rows import settings_rows
from proxy.guards.body_limit import CONSOLE_FORM_BYTES
from tests.conftest import running
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.console_helpers import post, ref, settled, upload_texts
from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find

pytestmark = pytest.mark.anyio

ORBANEX = "Orbanex Labs employs Bob Jones."
STYLESHEET = '<link rel="stylesheet" href="/admin/static/console.css">'


@pytest.fixture
def people(fake: FakeOllama) -> KnownFacts:
    fake.structured = KnownFacts({**PEOPLE, "Orbanex Labs": "Organization"})
    return fake.structured


@pytest.fixture
async def console(settings: Settings, fake: FakeOllama, people: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    """A console behind a password, logged in, over three documents, processed."""
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        await log_in(client)
        await upload_texts(client, ("team.txt", TEAM), ("city.md", CITY), ("orbanex.txt", ORBANEX))
        await settled(client)
        yield client


@pytest.fixture
async def guarded(settings: Settings, fake: FakeOllama) -> AsyncIterator[httpx.AsyncClient]:
    """A console behind a password, not logged in."""
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        yield client


def row_of(rows: list, env: str) -> tuple[str, str]:
    return next((shown, source) for setting, shown, source in rows if setting.env == env)


# --- item 7: the settings page says what is true ---

def test_a_secret_at_its_default_is_shown_and_a_set_secret_says_where_it_came_from(tmp_path) -> None:
    data = str(tmp_path / "data")
    plain = settings_rows(Settings.load(environ={"GRAPHGATE_DATA_DIR": data}))
    assert row_of(plain, "GRAPHGATE_STORE") == ("embedded", "default")
    assert row_of(plain, "GRAPHGATE_API_KEY") == ("(not set)", "default")

    uri = "postgresql://graph:s3cret-pw@db.example:5432/graphgate"
    loaded = Settings.load(environ={"GRAPHGATE_DATA_DIR": data, "GRAPHGATE_STORE": uri,
                                    "GRAPHGATE_API_KEY": "key-0123456789"})
    rows = settings_rows(loaded)
    assert row_of(rows, "GRAPHGATE_STORE") == ("postgresql://graph:•••@db.example:5432/graphgate", "environment")
    assert row_of(rows, "GRAPHGATE_API_KEY") == ("(set, hidden)", "environment")
    assert not any("s3cret-pw" in shown or "key-0123456789" in shown for _, shown, _ in rows)

    # given by the program that built the settings (an embedding application): not "default"
    given = settings_rows(loaded.replace(admin_password="pw-given-in-code", cors_origins=("https://a", "https://b")))
    assert row_of(given, "GRAPHGATE_ADMIN_PASSWORD") == ("(set, hidden)", "the program that started GraphGate")
    assert row_of(given, "GRAPHGATE_CORS_ORIGINS") == ("https://a, https://b", "the program that started GraphGate")


async def test_the_settings_page_shows_the_truthful_rows_and_never_a_secret(settings: Settings,
                                                                           fake: FakeOllama) -> None:
    loaded = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(settings.data_dir), "GRAPHGATE_API_KEY": "key-abcdef"})
    async with console_client(loaded, fake) as client:
        page = await client.get("/admin/settings", headers={"Authorization": "Bearer key-abcdef"})
    assert page.status_code == 200
    store = must_find(r'<tr data-setting="GRAPHGATE_STORE">(.*?)</tr>', page.text).group(1)
    assert ">embedded<" in store and ">default<" in store
    key = must_find(r'<tr data-setting="GRAPHGATE_API_KEY">(.*?)</tr>', page.text).group(1)
    assert "(set, hidden)" in key and ">environment<" in key
    assert "key-abcdef" not in page.text
    assert 'class="settings reflow"' in page.text   # wraps at any width, one block per setting on a phone


# --- item 8: the login page offers nothing it cannot open; every error page is styled ---

async def test_the_login_page_shows_no_menu_no_switcher_and_no_logout(guarded: httpx.AsyncClient) -> None:
    page = await guarded.get("/admin/login")
    assert page.status_code == 200 and "Log in" in page.text
    assert 'aria-label="Console"' not in page.text and "Log out" not in page.text and "kb-switch" not in page.text
    links = re.findall(r'href="([^"]+)"', page.text)
    assert all(link.startswith("/admin/static/") or link.startswith("data:") for link in links), links

    await log_in(guarded)
    dashboard = await guarded.get("/admin/")
    assert 'aria-label="Console"' in dashboard.text and "Log out" in dashboard.text
    out = await followed(guarded, await post(guarded, "/admin/logout"))
    assert notice(out) == "You are logged out." and "Log out" not in out.text


def assert_styled(response: httpx.Response, status: int, way_back: str, *, inline: bool = False) -> None:
    text = response.text
    assert response.status_code == status, (status, text[:300])
    assert response.headers["content-type"].startswith("text/html"), response.headers
    assert "<h1>Something went wrong</h1>" in text and f"<strong>{status} " in text, text[:500]
    assert must_find(r'<a id="way-back" href="([^"]+)"', text).group(1) == way_back
    if inline:   # its own address refuses the stylesheet: it is in the page
        assert "<style>" in text and ":root {" in text and STYLESHEET not in text and "<script" not in text
    else:
        assert STYLESHEET in text
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert "Traceback" not in text


async def test_every_refusal_of_a_console_address_is_a_styled_page_with_a_way_back(
        guarded: httpx.AsyncClient) -> None:
    # 401: a form sent without a login (the login page's "Log out" used to lead there)
    assert_styled(await guarded.post("/admin/logout"), 401, "/admin/login")
    # 413 before the login: the login form's own bound
    assert_styled(await guarded.post("/admin/login", content=b"x" * 10_000,
                                     headers={"content-type": "application/x-www-form-urlencoded"}),
                  413, "/admin/login")
    await log_in(guarded)
    assert_styled(await guarded.get("/admin/no-such-page"), 404, "/admin/")
    assert "page not found" in (await guarded.get("/admin/no-such-page")).text
    assert_styled(await guarded.get("/admin/logout"), 405, "/admin/")
    assert_styled(await post(guarded, "/admin/kbs", {"name": "x"}, csrf=False), 403, "/admin/")
    # 413 of a logged-in console form, declared and counted
    big = {"content-type": "application/x-www-form-urlencoded"}
    assert_styled(await guarded.post("/admin/kbs", content=b"x" * (CONSOLE_FORM_BYTES + 1), headers=big), 413,
                  "/admin/")
    # 403 of CORS: a page of another site posting to the console
    assert_styled(await guarded.post("/admin/kbs", headers={"origin": "https://evil.example"}), 403, "/admin/")
    # 403 of the Host check (DNS rebinding): the page reads nothing of the session, not even its CSRF token
    rebound = await guarded.get("/admin/", headers={"host": "evil.example:11435"})
    assert_styled(rebound, 403, "http://localhost:11435/admin/", inline=True)
    assert "X-CSRF-Token" not in rebound.text and 'name="csrf"' not in rebound.text
    assert 'aria-label="Console"' not in rebound.text


async def test_the_open_console_refuses_a_remote_client_with_a_styled_page(settings: Settings,
                                                                          fake: FakeOllama) -> None:
    async with console_client(settings, fake, client_host="203.0.113.9") as client:
        page = await client.get("/admin/")
    assert_styled(page, 403, "/admin/")
    assert "GRAPHGATE_ADMIN_PASSWORD" in page.text and 'aria-label="Console"' not in page.text


async def test_server_errors_under_the_console_are_styled_pages(settings: Settings, fake: FakeOllama) -> None:
    app = create_app(settings, upstream_transport=fake.transport())
    async with running(app):
        scope = {"type": "http", "method": "GET", "path": "/admin/documents", "raw_path": b"/admin/documents",
                 "query_string": b"", "headers": [(b"host", b"127.0.0.1:11435")], "client": ("127.0.0.1", 5000),
                 "server": ("127.0.0.1", 11435), "scheme": "http", "app": app}
        unavailable = await on_graphgate_error(Request(scope), ServiceUnavailable("the store is being rebuilt"))
        crashed = await on_unexpected(Request(scope), RuntimeError("boom"))
    for response, status in ((unavailable, 503), (crashed, 500)):
        text = bytes(response.body).decode()
        assert response.status_code == status and STYLESHEET in text and 'id="way-back" href="/admin/"' in text
        assert f"<strong>{status} " in text and "<h1>Something went wrong</h1>" in text
    assert "the store is being rebuilt" in bytes(unavailable.body).decode()
    assert "boom" not in bytes(crashed.body).decode()   # the type, never the details


async def test_an_htmx_error_is_said_in_the_flash_area(console: httpx.AsyncClient) -> None:
    response = await console.get("/admin/no-such-page", headers={"HX-Request": "true"})
    assert response.status_code == 404 and response.headers["hx-retarget"] == "#flash"
    assert "<html" not in response.text and "404 Not Found" in response.text


# --- item 9: a name typed into the address ---

async def test_an_entity_is_found_by_the_name_typed_into_the_address(console: httpx.AsyncClient) -> None:
    target = f"/admin/entities/{ref('orbanex labs')}"
    for typed in ("/admin/entities/Orbanex%20Labs", "/admin/entities/orbanex%20%20LABS",
                  "/admin/entities/find?name=ORBANEX+labs"):
        found = await console.get(typed)
        assert found.status_code == 303 and found.headers["location"] == target, (typed, found.text[:200])
    page = await console.get(target)
    assert page.status_code == 200 and "<h1>Orbanex Labs" in page.text

    # part of a name: the entity search with it filled in, and a word on why
    partial = await console.get("/admin/entities/Orbanex")
    assert partial.status_code == 303 and partial.headers["location"] == "/admin/entities?q=Orbanex"
    search = await console.get(partial.headers["location"])
    assert 'value="Orbanex"' in search.text and "Orbanex Labs" in search.text
    assert "No entity is named “Orbanex”" in must_find(r'<p class="notice"[^>]*>(.*?)</p>', search.text).group(1)

    # no such name at all: a 404 page that offers the search, never a 400
    missing = await console.get("/admin/entities/Nobody%20At%20All")
    assert_styled(missing, 404, "/admin/entities?q=Nobody+At+All")
    assert "no entity named &#39;Nobody At All&#39;" in missing.text
    assert (await console.get("/admin/graph", params={"entity": "Orbanex Labs"})).status_code == 200


async def test_an_address_of_a_merged_entity_leads_to_what_it_was_merged_into(console: httpx.AsyncClient) -> None:
    merged = await post(console, "/admin/merge", [("key", ref("orion")), ("key", ref("acme corp")),
                                                  ("target", ref("acme corp"))])
    assert merged.status_code == 303
    old = await console.get(f"/admin/entities/{ref('orion')}")
    assert old.status_code == 303 and old.headers["location"] == f"/admin/entities/{ref('acme corp')}"


# --- item 10: counts agree with their nouns; labels are readable; a delete says it was done ---

def test_the_count_filter_agrees_with_its_number() -> None:
    assert [counted(n, "chunk") for n in (0, 1, 2)] == ["0 chunks", "1 chunk", "2 chunks"]
    assert counted(1, "entity", "entities") == "1 entity" and counted(3, "entity", "entities") == "3 entities"
    assert noun(1, "entry", "entries") == "entry" and noun(None, "token") == "tokens"


ONE_PLURAL = re.compile(r"(?<![\d.,/])1 (chunks|entities|relations|documents|nodes|tokens|requests|models|entries|"
                        r"source chunks|self-loops|duplicate relations|communities)\b")


async def test_no_page_says_one_of_something_in_the_plural(console: httpx.AsyncClient) -> None:
    documents = (await console.get("/admin/documents")).text
    orbanex = must_find(r'href="(/admin/documents/doc-[^"]+)">orbanex.txt', documents)
    paths = ["/admin/", orbanex.group(1), orbanex.group(1) + "/delete", f"/admin/entities/{ref('orbanex labs')}",
             f"/admin/entities/{ref('orbanex labs')}/delete", f"/admin/graph?entity={ref('berlin')}",
             "/admin/suggestions", "/admin/cache"]
    for path in paths:
        page = await console.get(path)
        assert page.status_code == 200, path
        assert not ONE_PLURAL.search(re.sub(r"<[^>]+>", "", page.text)), (path, ONE_PLURAL.findall(page.text))
    document = await console.get(orbanex.group(1))
    assert "1 chunk ·" in re.sub(r"<[^>]+>", "", document.text)


def test_graph_labels_are_drawn_at_a_readable_size_never_scaled_down() -> None:
    svg = render_svg([Node("a", "Alpha", "Person", 1), Node("b", "Beta", "Person", 1)], [], "a",
                     link=lambda key: f"/admin/entities/{key}", width=520, height=400)
    assert FONT_SIZE >= 12 and f'font-size="{FONT_SIZE}"' in svg
    assert 'style="min-width: 520px"' in svg   # the page scrolls its frame rather than shrink it


def notice(page: httpx.Response) -> str:
    found = re.search(r'<p class="notice" role="status" id="done">(.*?)</p>', page.text)
    return found.group(1) if found else ""


async def followed(client: httpx.AsyncClient, response: httpx.Response) -> httpx.Response:
    assert response.status_code == 303, response.text[:300]
    return await client.get(response.headers["location"])


async def test_every_delete_says_what_it_did_on_the_page_it_leads_to(console: httpx.AsyncClient) -> None:
    documents = (await console.get("/admin/documents")).text
    team = must_find(r'href="/admin/documents/(doc-[^"]+)">team.txt', documents).group(1)
    page = await followed(console, await post(console, f"/admin/documents/{team}/delete"))
    assert notice(page).startswith("Deleted the document “team.txt” (1 chunk, ")
    assert notice(await console.get("/admin/documents")) == ""   # said once
    again = await followed(console, await post(console, f"/admin/documents/{team}/delete"))
    assert notice(again) == "The document was deleted already."

    page = await followed(console, await post(console, f"/admin/entities/{ref('berlin')}/delete"))
    assert notice(page).startswith("Deleted the entity “Berlin” and its ")
    merged = await post(console, "/admin/merge", [("key", ref("carol white")), ("key", ref("acme corp")),
                                                  ("target", ref("acme corp"))], htmx=True)
    assert merged.status_code == 204   # htmx goes to the merged entity's page, where it is said
    page = await console.get(merged.headers["hx-redirect"])
    assert notice(page) == "Merged 1 entity into “Acme Corp”."

    page = await followed(console, await post(console, "/admin/cache/extract/clear"))
    assert re.fullmatch(r"Cleared the extraction cache \(\d+ entr(y|ies) removed\)\.", notice(page)), notice(page)

    page = await followed(console, await post(console, "/admin/kbs", {"name": "hr"}))
    assert notice(page) == "Created the knowledge base “hr”."
    page = await followed(console, await post(console, "/admin/models", {"alias": "hr-bot", "model": "llama3.2:latest",
                                                                      "kb": "hr"}))
    assert notice(page) == "Created the knowledge model “hr-bot:latest”."   # as clients list it
    page = await followed(console, await post(console, "/admin/models/hr-bot/delete"))
    assert notice(page) == "Deleted the knowledge model “hr-bot:latest”."
    page = await followed(console, await post(console, "/admin/kbs/hr/delete", {"confirm": "hr"}))
    assert notice(page) == "Deleted the knowledge base “hr” with its documents and graph."

    made = await post(console, "/admin/keys", {"name": "laptop", "role": "read"})
    key_id = must_find(r'href="/admin/keys/([^"/]+)/revoke"', made.text).group(1)
    page = await followed(console, await post(console, f"/admin/keys/{key_id}/revoke"))
    assert notice(page).startswith("Revoked the key “laptop”")


async def test_a_confirmation_cannot_be_forged(console: httpx.AsyncClient) -> None:
    console.cookies.set("graphgate_flash", "Your password expired: log in at evil.example", domain="127.0.0.1",
                        path="/admin")
    page = await console.get("/admin/documents")
    assert notice(page) == "" and "evil.example" not in page.text
    assert 'graphgate_flash=""' in page.headers.get("set-cookie", "") or "graphgate_flash=;" in \
        page.headers.get("set-cookie", "")
