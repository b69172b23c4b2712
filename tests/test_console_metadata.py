"""Document metadata in the console, in-process: the upload form's metadata field, the table's
chips and metadata filter (kept in the paging and polling links; a bad filter is a readable 400),
the document page's metadata and its edit form (CSRF-checked; bad JSON refused, nothing changed),
and the playground's filter (sent as /rag/query's ``filters``; what it matched is shown). One
journey in a real browser (Debian's chromium, as tests/test_console_browser.py drives it)."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from playwright.sync_api import FilePayload, Page, expect

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.console_helpers import post, settled
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.playground_helpers import rows, run
from tests.rag_helpers import store_snapshot_of
from tests.test_console_browser import Watcher, browser_page

pytestmark = pytest.mark.anyio

TEAM_META = {"category": "projects", "year": 2024, "tags": ["orion", "staff"]}
CITY_META = {"category": "places", "year": 2023}
TABLE = {"HX-Request": "true", "HX-Target": "document-table"}


@pytest.fixture
async def console(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings, fake) as client:
        yield client


def kb(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]


async def upload(client: httpx.AsyncClient, metadata: str, *docs: tuple[str, str]) -> httpx.Response:
    files = [("files", (name, text.encode(), "text/plain")) for name, text in docs]
    return await post(client, "/admin/documents", {"metadata": metadata}, files=files, htmx=True)


async def two_documents(client: httpx.AsyncClient) -> dict[str, str]:
    """team.txt and city.md uploaded through the form, each with its metadata: name -> id."""
    for name, text, meta in (("team.txt", TEAM, TEAM_META), ("city.md", CITY, CITY_META)):
        response = await upload(client, json.dumps(meta), (name, text))
        assert response.status_code == 200 and 'class="badge accepted"' in response.text, response.text
    await settled(client)
    listed, _ = await kb(client).documents.page(status=None, search=None, sort="name", descending=False,
                                                limit=10, offset=0)
    return {d["name"]: d["id"] for d in listed}


def table_names(page: str) -> list[str]:
    return re.findall(r'data-status="\w+">\s*<td><a [^>]*>([^<]+)</a>', page)


def chips(page: str, document_id: str) -> list[str]:
    row = re.search(rf'<tr data-id="{document_id}".*?</tr>', page, re.DOTALL)
    assert row, f"no row for {document_id}"
    return [html.unescape(c) for c in re.findall(r'<span class="chip"[^>]*>([^<]*)</span>', row.group(0))]


async def test_the_upload_form_stores_metadata_and_the_table_shows_it(console: httpx.AsyncClient) -> None:
    page = (await console.get("/admin/documents")).text
    assert 'name="metadata" placeholder=\'{"category": "hr", "year": 2024' in page  # with an example
    ids = await two_documents(console)
    assert (await kb(console).documents.get(ids["team.txt"]))["metadata"] == TEAM_META

    table = (await console.get("/admin/documents")).text
    assert chips(table, ids["team.txt"]) == ["category: projects", "year: 2024", "tags: orion, staff"]
    assert chips(table, ids["city.md"]) == ["category: places", "year: 2023"]


@pytest.mark.parametrize(("metadata", "said"), [
    ("{not json", "metadata is not valid JSON"),
    ('{"owner": {"name": "x"}}', "metadata['owner'] must be a string"),
    ('["hr"]', "metadata must be a JSON object"),
])
async def test_bad_upload_metadata_is_said_and_stores_nothing(console: httpx.AsyncClient, metadata: str,
                                                              said: str) -> None:
    before = await store_snapshot_of(kb(console))
    response = await upload(console, metadata, ("team.txt", TEAM))
    assert response.status_code == 400
    assert said in html.unescape(response.text) and "Traceback" not in response.text
    assert response.headers["hx-retarget"] == "#flash"  # the console's place for a refused action
    assert await store_snapshot_of(kb(console)) == before
    # without htmx: a page that says it
    files = [("files", ("team.txt", TEAM.encode(), "text/plain"))]
    page = await post(console, "/admin/documents", {"metadata": metadata}, files=files)
    assert page.status_code == 400 and "<html" in page.text and said in html.unescape(page.text)
    assert await store_snapshot_of(kb(console)) == before


async def test_the_metadata_filter_narrows_the_table(console: httpx.AsyncClient) -> None:
    await two_documents(console)
    projects = await console.get("/admin/documents", params={"filter": '{"category": "projects"}'})
    assert projects.status_code == 200 and table_names(projects.text) == ["team.txt"]
    assert 'value="{&#34;category&#34;: &#34;projects&#34;}"' in projects.text  # the input keeps it
    recent = await console.get("/admin/documents", params={"filter": '{"year": {"$gte": 2023}}', "sort": "name",
                                                           "order": "asc"}, headers=TABLE)
    assert "<html" not in recent.text and table_names(recent.text) == ["city.md", "team.txt"]
    by_name = await console.get("/admin/documents", params={"filter": '{"$document": "city.md"}', "q": "team"})
    assert table_names(by_name.text) == [] and "No documents match" in by_name.text  # both must hold
    tagged = await console.get("/admin/documents", params={"filter": '{"tags": "orion"}'})
    assert table_names(tagged.text) == ["team.txt"]


@pytest.mark.parametrize(("text", "said"), [
    ("{category", "the filter is not valid JSON"),
    ('{"year": {"$near": 1}}', "unknown operator '$near'"),
    ("[1]", "the filter must be a JSON object"),
])
async def test_a_bad_filter_is_a_readable_400(console: httpx.AsyncClient, text: str, said: str) -> None:
    await two_documents(console)
    page = await console.get("/admin/documents", params={"filter": text})
    assert page.status_code == 400 and "<html" in page.text and "Traceback" not in page.text
    assert said in html.unescape(page.text) and 'id="filter-error"' in page.text
    assert table_names(page.text) == [] and 'name="filter"' in page.text  # the page stays usable
    fragment = await console.get("/admin/documents", params={"filter": text}, headers=TABLE)
    assert fragment.status_code == 400 and "<html" not in fragment.text and said in html.unescape(fragment.text)


async def test_the_filter_is_kept_in_the_paging_and_polling_links(console: httpx.AsyncClient) -> None:
    for i in range(52):  # more than a page (50) of matching documents, and one that does not match
        response = await console.post("/rag/documents", json={"name": f"note-{i:02}.txt", "text": f"Note {i}.",
                                                               "metadata": {"batch": "a"}})
        assert response.status_code == 202, response.text
    await console.post("/rag/documents", json={"name": "other.txt", "text": "Other.", "metadata": {"batch": "b"}})
    wanted = '{"batch": "a"}'
    first = await console.get("/admin/documents", params={"filter": wanted, "sort": "name", "order": "asc"})
    assert len(table_names(first.text)) == 50 and "(52 in all)" in first.text
    links = {html.unescape(h) for h in re.findall(r'<nav class="pager".*?</nav>', first.text, re.DOTALL)
             for h in re.findall(r'href="\?([^"]+)"', h)}
    assert links and all(parse_qs(link)["filter"] == [wanted] for link in links)
    second = await console.get("/admin/documents?" + links.pop(), headers=TABLE)
    assert table_names(second.text) == ["note-50.txt", "note-51.txt"]
    # while documents are on their way, the table polls itself: with the same filter
    polls = [html.unescape(u) for u in re.findall(r'hx-get="(/admin/documents\?[^"]+)" hx-trigger="every 2s"',
                                                   first.text)]
    assert all(parse_qs(urlsplit(u).query)["filter"] == [wanted] for u in polls)
    await settled(console)


async def test_the_document_page_shows_and_edits_metadata(console: httpx.AsyncClient) -> None:
    ids = await two_documents(console)
    path = f"/admin/documents/{ids['team.txt']}"
    page = (await console.get(path)).text
    shown = re.search(r'<p class="chips" id="metadata-chips">(.*?)</p>', page, re.DOTALL)
    assert shown and "category: projects" in shown.group(1) and "tags: orion, staff" in shown.group(1)
    box = re.search(r'<textarea name="metadata"[^>]*>(.*?)</textarea>', page, re.DOTALL)
    assert box and json.loads(html.unescape(box.group(1))) == TEAM_META

    saved = await post(console, f"{path}/metadata", {"metadata": '{"category": "hr", "year": 2025}'})
    assert saved.status_code == 303 and saved.headers["location"] == path
    assert (await kb(console).documents.get(ids["team.txt"]))["metadata"] == {"category": "hr", "year": 2025}
    assert "category: hr" in (await console.get(path)).text
    hr = await console.get("/admin/documents", params={"filter": '{"category": "hr"}'})
    assert table_names(hr.text) == ["team.txt"]

    cleared = await post(console, f"{path}/metadata", {"metadata": "  "})
    assert cleared.status_code == 303
    assert (await kb(console).documents.get(ids["team.txt"]))["metadata"] == {}


@pytest.mark.parametrize(("text", "said"), [
    ('{"category": ', "metadata is not valid JSON"),
    ('{"$op": 1}', "not starting with '$'"),
    ('{"ok": true}', "metadata['ok'] must be a string"),
])
async def test_a_bad_metadata_edit_is_said_and_changes_nothing(console: httpx.AsyncClient, text: str,
                                                               said: str) -> None:
    ids = await two_documents(console)
    path = f"/admin/documents/{ids['city.md']}"
    before = await store_snapshot_of(kb(console))
    refused = await post(console, f"{path}/metadata", {"metadata": text})
    assert refused.status_code == 400 and "<html" in refused.text
    error = re.search(r'<p class="error" role="alert" id="metadata-error">(.*?)</p>', refused.text, re.DOTALL)
    assert error and said in html.unescape(error.group(1))
    box = re.search(r'<textarea name="metadata"[^>]*>(.*?)</textarea>', refused.text, re.DOTALL)
    assert box and html.unescape(box.group(1)) == text  # what was typed, to be corrected
    assert "Chunk 1" in refused.text  # the whole page, chunks included
    assert await store_snapshot_of(kb(console)) == before
    assert (await kb(console).documents.get(ids["city.md"]))["metadata"] == CITY_META


async def test_metadata_edits_need_the_csrf_token(console: httpx.AsyncClient) -> None:
    ids = await two_documents(console)
    path = f"/admin/documents/{ids['city.md']}/metadata"
    forged = await console.post(path, data={"metadata": "{}", "csrf": "forged"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    missing = await post(console, path, {"metadata": "{}"}, csrf=False)
    assert missing.status_code == 403
    assert (await kb(console).documents.get(ids["city.md"]))["metadata"] == CITY_META
    unknown = await post(console, "/admin/documents/doc-nope/metadata", {"metadata": "{}"})
    assert unknown.status_code == 404 and "doc-nope" in unknown.text


async def test_the_playground_sends_the_filter_and_shows_what_it_matched(console: httpx.AsyncClient) -> None:
    await two_documents(console)
    question = "Where is Acme Corp headquartered, and who works there?"
    everything = await run(console, htmx=True, query=question)
    assert 'id="filtered"' not in everything.text
    assert {d for row in rows(everything.text, "result-chunks") for d in row[-2].split(", ")} == {"team.txt",
                                                                                                   "city.md"}

    places = await run(console, htmx=True, query=question, filters='{"category": "places"}')
    assert places.status_code == 200, places.text
    filtered = re.search(r'<p id="filtered">(.*?)</p>', places.text, re.DOTALL)
    assert filtered and " ".join(html.unescape(re.sub(r"<[^>]+>", "", filtered.group(1))).split()) == \
        'Filtered by {"category": "places"}: 1 matching document.'
    assert {row[-2] for row in rows(places.text, "result-chunks")} == {"city.md"}
    assert 'value="{&#34;category&#34;: &#34;places&#34;}"' in (
        await run(console, query=question, filters='{"category": "places"}')).text  # the full page keeps it

    nothing = await run(console, htmx=True, query=question, filters='{"category": "none"}')
    assert "no searchable document matches the filter" in nothing.text and "0 matching documents" in nothing.text

    bad = await run(console, htmx=True, query=question, filters='{"year": {"$gt": [1]}}')
    assert bad.status_code == 400 and bad.headers["hx-retarget"] == "#flash"
    assert "$gt takes a string or a number" in html.unescape(bad.text)


def test_metadata_in_a_real_browser(live_gateway: str, facts: KnownFacts) -> None:
    """Chromium: upload two files with their metadata, filter the table by it (htmx, no reload),
    edit one document's metadata on its page, and see the filter find it afterwards."""
    with browser_page(live_gateway, Watcher(origin=live_gateway)) as page:
        _upload_filter_and_edit(page)


def _upload_filter_and_edit(page: Page) -> None:
    page.goto("/admin/documents")
    expect(page.locator("#document-table")).to_contain_text("No documents yet")
    page.wait_for_load_state("load")   # htmx has taken the form: a click before it posts the plain form
    for name, text, meta in (("team.txt", TEAM, TEAM_META), ("city.md", CITY, CITY_META)):
        page.get_by_label("Metadata", exact=True).fill(json.dumps(meta))
        page.locator("input[type=file][name=files]").set_input_files(
            [FilePayload(name=name, mimeType="text/plain", buffer=text.encode())])
        page.get_by_role("button", name="Upload", exact=True).click()
        expect(page.locator("#upload-results li").filter(has_text=name).locator(".badge")).to_have_text("accepted")
    rows_shown = page.locator("#documents tbody tr")
    expect(page.locator('#documents tr[data-status="processed"]')).to_have_count(2, timeout=30_000)
    expect(rows_shown.filter(has_text="team.txt").locator(".chip")).to_have_text(
        ["category: projects", "year: 2024", "tags: orion, staff"])
    expect(rows_shown.filter(has_text="city.md").locator(".chip")).to_have_text(["category: places", "year: 2023"])

    page.evaluate("() => { window.__same_page = true; }")
    page.get_by_label("Metadata filter").fill('{"category": "places"}')
    page.get_by_label("Metadata filter").press("Enter")
    expect(page).to_have_url(re.compile(r"/admin/documents\?.*filter=%7B%22category%22"))  # pushed by htmx
    expect(rows_shown).to_have_count(1)
    expect(rows_shown.get_by_role("link")).to_have_text("city.md")
    assert page.evaluate("() => window.__same_page === true"), "filtering reloaded the page"

    rows_shown.get_by_role("link", name="city.md").click()
    expect(page).to_have_url(re.compile(r"/admin/documents/doc-[^/?]+$"))
    expect(page.locator("#metadata-chips .chip")).to_have_text(["category: places", "year: 2023"])
    box = page.locator("textarea[name=metadata]")
    assert json.loads(box.input_value()) == CITY_META
    box.fill('{"category": "projects", "year": 2023, "source": "atlas"}')
    page.get_by_role("button", name="Save metadata", exact=True).click()
    expect(page.locator("#metadata-chips .chip")).to_have_text(["category: projects", "year: 2023", "source: atlas"])
    expect(page.locator("#metadata-error")).to_have_count(0)

    page.goto("/admin/documents?" + urlencode({"filter": '{"category": "projects"}', "sort": "name", "order": "asc"}))
    expect(rows_shown).to_have_count(2)
    expect(rows_shown.get_by_role("link")).to_have_text(["city.md", "team.txt"])
    expect(page.get_by_label("Metadata filter")).to_have_value('{"category": "projects"}')
