"""The console's knowledge bases in-process: the switcher in every page's header, the base carried by
every console URL, form and redirect of a base's pages (and by none of default's), the bases page
(create with overrides, refusals said in the page, delete confirmed by the base's name), and a
document uploaded through the console on one base seen there only. Real engines; the fake model."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from markupsafe import Markup

from admin.kb_links import links_for
from proxy.core.settings import Settings
from proxy.knowledge.bases import KnowledgeBases
from tests.conftest import gateway_client
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.console_helpers import post
from tests.corpus import CITY, CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.playground_helpers import run

pytestmark = pytest.mark.anyio

URL_ATTRIBUTES = ("href", "action", "formaction", "hx-get", "hx-post", "hx-put", "hx-patch", "hx-delete",
                  "data-answer-stream")


@dataclass
class Form:
    attrs: dict[str, str]
    fields: list[dict[str, str]] = field(default_factory=list)

    @property
    def method(self) -> str:
        return self.attrs.get("method", "get").lower()


class Page(HTMLParser):
    """Every URL a page's tags hold (tag, attribute, url) and its forms with their fields."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.forms: list[Form] = []
        self._form: Form | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for name in URL_ATTRIBUTES:
            if name in values:
                self.urls.append((tag, name, values[name]))
        if tag == "form":
            self._form = Form(values)
            self.forms.append(self._form)
        elif tag in ("input", "select", "textarea", "button") and self._form is not None:
            self._form.fields.append({"tag": tag, **values})

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None


def console_url(url: str) -> bool:
    if url.startswith("?"):
        return True
    parts = urlsplit(url)
    return not parts.netloc and parts.path.startswith("/admin") and not parts.path.startswith("/admin/static/")


def kb_of(url: str) -> list[str]:
    return parse_qs(urlsplit(url).query).get("kb", [])


def stray_urls(text: str, kb: str, *, elsewhere: frozenset[str] = frozenset()) -> list[str]:
    """What on the page would lose base ``kb``: a console URL without kb=<kb> (a GET form's action
    aside: its fields make its URL; ``elsewhere``: the links meant to go to another base), a GET
    form without a kb field that says ``kb``."""
    page = Page(text)
    get_forms = {(f.attrs.get("action"), f.attrs.get("hx-get")) for f in page.forms if f.method == "get"}
    stray = []
    for tag, attribute, url in page.urls:
        if not console_url(url):
            continue
        if (tag == "form" and any(url in pair for pair in get_forms)) or url in elsewhere:
            continue
        if kb_of(url) != [kb]:
            stray.append(f"<{tag} {attribute}={url!r}>")
    for form in page.forms:
        if form.method != "get":
            continue
        kbs = [f for f in form.fields if f.get("name") == "kb"]
        switcher = any(f["tag"] == "select" for f in kbs)
        if not switcher and [f.get("value") for f in kbs] != [kb]:
            stray.append(f"<form action={form.attrs.get('action')!r}> without kb={kb}")
    return stray


def settings_table(text: str) -> dict[str, tuple[str, str]]:
    """A base's page's settings: each setting's value and where it comes from."""
    section = must_find(r'<section class="card" id="overrides">(.*?)</section>', text, re.DOTALL).group(1)
    return {key: (value, " ".join(re.sub(r"<[^>]+>", " ", source).split()))
            for key, value, source in re.findall(r'<tr data-setting="(\w+)"><td><code>\w+</code></td>'
                                                 r'<td class="value">([^<]*)</td>\s*<td>(.*?)</td></tr>',
                                                 section, re.DOTALL)}


def switcher(text: str) -> tuple[str, list[str], str]:
    """The header's switcher: its action, the bases it offers, the one selected."""
    block = must_find(r'<form method="get" action="([^"]*)" class="kb-switch".*?</form>', text, re.DOTALL)
    options = re.findall(r'<option value="([^"]*)"', block.group(0))
    chosen = must_find(r'<option value="([^"]*)" selected', block.group(0)).group(1)
    return block.group(1), options, chosen


def registry(client: httpx.AsyncClient) -> KnowledgeBases:
    return client._transport.app.state.gateway.bases  # type: ignore[attr-defined]


async def create(client: httpx.AsyncClient, name: str) -> None:
    response = await client.post("/rag/kbs", json={"name": name})
    assert response.status_code == 201, response.text


async def upload_to(client: httpx.AsyncClient, kb: str, *docs: tuple[str, str], htmx: bool = True) -> httpx.Response:
    """Through the console's upload form, on base ``kb``; then wait until that base is idle."""
    files = [("files", (name, text.encode(), "text/plain")) for name, text in docs]
    path = "/admin/documents" if kb == "default" else f"/admin/documents?kb={kb}"
    response = await post(client, path, files=files, htmx=htmx)
    assert response.status_code == 200, response.text
    async with registry(client).lease(kb) as base:
        with anyio.fail_after(20):
            await base.documents.wait_idle()
    return response


@pytest.fixture
async def console(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings, fake) as client:
        yield client


async def test_the_switcher_lists_the_bases_and_goes_to_the_same_section(console: httpx.AsyncClient) -> None:
    await create(console, "hr")
    await create(console, "sales")
    for path, section in [("/admin/documents", "/admin/documents"), ("/admin/cache/query", "/admin/cache"),
                          ("/admin/", "/admin/"), ("/admin/kbs/sales", "/admin/kbs")]:
        action, offered, chosen = switcher((await console.get(path, params={"kb": "hr"})).text)
        assert (action, offered, chosen) == (section, ["default", "hr", "sales"], "hr"), path
    action, offered, chosen = switcher((await console.get("/admin/entities")).text)
    assert (action, chosen) == ("/admin/entities", "default")

    # what the switcher submits: the section of the chosen base; default's address has no kb
    assert (await console.get("/admin/entities", params={"kb": "sales"})).status_code == 200
    back = await console.get("/admin/entities", params={"kb": "default", "q": "ali"})
    assert back.status_code == 303 and back.headers["location"] == "/admin/entities?q=ali"


async def test_the_login_page_names_no_base(settings: Settings, fake: FakeOllama) -> None:
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        await registry(client).create("hr-secret")
        login = await client.get("/admin/login")
        assert 'class="kb-switch"' not in login.text and "hr-secret" not in login.text
        assert (await log_in(client)).status_code == 303
        _, offered, _ = switcher((await client.get("/admin/documents")).text)
        assert offered == ["default", "hr-secret"]


async def test_the_login_page_tells_no_one_whether_a_base_exists(settings: Settings, fake: FakeOllama) -> None:
    """Issue 29's fuzzer: the login page is public, so its links must not keep ``?kb=`` for a name
    that exists and drop it for one that does not (a probe of the bases' names)."""
    async with console_client(settings.replace(admin_password=PASSWORD), fake) as client:
        await registry(client).create("hr-secret")
        for method in ("GET", "POST"):
            pages = [await client.request(method, "/admin/login", params={"kb": kb}) for kb in ("hr-secret", "nobody")]
            assert pages[0].status_code == pages[1].status_code
            assert pages[0].text.replace("hr-secret", "X") == pages[1].text.replace("nobody", "X"), method
            assert "kb=hr-secret" not in pages[0].text


async def test_every_console_url_of_base_hr_carries_it(console: httpx.AsyncClient, fake: FakeOllama) -> None:
    await create(console, "hr")
    await upload_to(console, "hr", ("team.txt", TEAM), ("city.md", CITY))
    result = await run(console, htmx=False, query="Who leads Orion?", answer="on")  # a full page, no kb: default
    assert result.status_code == 200
    hr_run = await console.post("/admin/playground?kb=hr", headers={"HX-Request": "true"},
                                data={"csrf": must_find(r'name="csrf" value="([^"]+)"', result.text).group(1),
                                      "query": "Who leads Orion?", "answer": "on"})
    assert hr_run.status_code == 200 and "data-answer-stream" in hr_run.text
    assert stray_urls(hr_run.text, "hr") == []

    documents = await console.get("/admin/documents", params={"kb": "hr"})
    document = must_find(r'href="(/admin/documents/[^"?]+)\?kb=hr"', documents.text).group(1)
    entities = await console.get("/admin/entities", params={"kb": "hr"})
    entity = must_find(r'href="(/admin/entities/[^"?]+)\?kb=hr"', entities.text).group(1)
    cache = await console.get("/admin/cache", params={"kb": "hr"})
    kind = must_find(r'href="(/admin/cache/[a-z_]+)\?kb=hr"', cache.text).group(1)
    paths = ["/admin/", "/admin/documents", document, f"{document}/delete", "/admin/entities", entity,
             f"{entity}/delete", "/admin/suggestions", "/admin/graph", "/admin/cache", kind, f"{kind}/clear",
             "/admin/playground", "/admin/chats", "/admin/settings", "/admin/kbs", "/admin/kbs/hr",
             "/admin/fragments/pipeline", "/admin/fragments/health"]
    graph = await console.get("/admin/graph", params={"kb": "hr", "entity": entity.rsplit("/", 1)[1]})
    assert graph.status_code == 200 and "<svg" in graph.text
    assert stray_urls(graph.text, "hr") == []
    seen = 0
    for path in paths:
        response = await console.get(path, params={"kb": "hr"})
        assert response.status_code == 200, (path, response.text[:300])
        elsewhere = frozenset({"/admin/documents?kb=default", "/admin/documents?kb=hr"}) \
            if path.startswith("/admin/kbs") else frozenset()   # each base's "Its documents" link
        assert stray_urls(response.text, "hr", elsewhere=elsewhere) == [], path
        seen += len(Page(response.text).urls)
    assert seen > 200   # the pages have their links: the check above had something to check

    # error pages, htmx fragments and redirects carry it too
    missing = await console.get("/admin/documents/nope", params={"kb": "hr"})
    assert missing.status_code == 404 and 'href="/admin/?kb=hr">dashboard' in missing.text
    assert stray_urls(missing.text, "hr") == []
    fragment = await console.get("/admin/documents", params={"kb": "hr"},
                                 headers={"HX-Request": "true", "HX-Target": "document-table"})
    assert "<html" not in fragment.text and "team.txt" in fragment.text
    assert stray_urls(fragment.text, "hr") == []
    found = await console.get("/admin/entities/find?name=Alice%20Smith&kb=hr")
    assert found.status_code == 303 and found.headers["location"].endswith("?kb=hr")
    saved = await post(console, f"{document}/metadata?kb=hr", {"metadata": '{"team": "orion"}'})
    assert saved.status_code == 303 and saved.headers["location"] == f"{document}?kb=hr"
    merged = await post(console, "/admin/merge?kb=hr", htmx=True, data=[
        ("key", entity.rsplit("/", 1)[1]), ("key", must_find(r'href="/admin/entities/([^"?]+)\?kb=hr"',
                                                             entities.text.split(entity, 1)[1]).group(1)),
        ("target", entity.rsplit("/", 1)[1])])
    assert merged.status_code == 204 and kb_of(merged.headers["hx-redirect"]) == ["hr"]

    # default's pages keep their addresses: no kb anywhere but the links that name a base themselves
    for path in ["/admin/", "/admin/documents", "/admin/entities", "/admin/kbs", "/admin/playground"]:
        page = Page((await console.get(path)).text)
        named = [url for _, _, url in page.urls if kb_of(url)]
        assert all(url.startswith("/admin/documents?kb=") for url in named), (path, named)
        assert all("kb" not in {f.get("name") for f in form.fields} or form.attrs.get("class") == "kb-switch"
                   for form in page.forms), path


async def test_a_page_of_an_unknown_base_is_a_404_that_leads_back_to_default(console: httpx.AsyncClient) -> None:
    response = await console.get("/admin/documents", params={"kb": "nope"})
    assert response.status_code == 404 and "no knowledge base named &#39;nope&#39;" in response.text
    assert all(not kb_of(url) for _, _, url in Page(response.text).urls)
    _, offered, chosen = switcher(response.text)
    assert offered == ["default", "nope"] and chosen == "nope"


async def test_creating_a_base_in_the_console(console: httpx.AsyncClient) -> None:
    made = await post(console, "/admin/kbs", [("name", "contracts"), ("setting", "language"), ("value", "German"),
                                              ("setting", ""), ("value", ""), ("setting", "chunk_tokens"),
                                              ("value", "800")])
    assert made.status_code == 303 and made.headers["location"] == "/admin/kbs/contracts"
    assert registry(console).bases["contracts"].overrides == {"language": "German", "chunk_tokens": 800}
    page = await console.get("/admin/kbs/contracts")
    assert page.status_code == 200
    table = settings_table(page.text)
    assert list(table) == ["llm_model", "entity_types", "language", "chunk_tokens", "chunk_overlap", "gleaning"]
    assert (table["language"], table["chunk_tokens"], table["chunk_overlap"]) == (
        ("German", "this base"), ("800", "this base"), ("100", "the gateway"))
    assert table["entity_types"][0].startswith("Person, ") and table["entity_types"][1] == "the gateway"
    assert table["llm_model"] == ("the upstream&#39;s first chat model", "the gateway")
    listing = await console.get("/admin/kbs")
    row = must_find(r'<tr data-name="contracts">(.*?)</tr>', listing.text, re.DOTALL).group(1)
    assert "<code>language</code> = German" in row and "closed" in row
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", row), row   # its creation, in UTC

    before = registry(console).names()
    for fields, status, said in [
        ([("name", "Bad Name!")], 400, "invalid knowledge base name &#39;Bad Name!&#39;"),
        ([("name", "contracts")], 409, "a knowledge base named &#39;contracts&#39; already exists"),
        ([("name", "default")], 409, "a knowledge base named &#39;default&#39; already exists"),
        ([("name", "")], 400, "a knowledge base needs a name"),
        ([("name", "x"), ("setting", ""), ("value", "German")], 400, "names no setting"),
        ([("name", "x"), ("setting", "language"), ("value", "a"), ("setting", "language"), ("value", "b")], 400,
         "overridden twice"),
        ([("name", "x"), ("setting", "chunk_tokens"), ("value", "lots")], 400, "settings.chunk_tokens: invalid value"),
        ([("name", "x"), ("setting", "mode"), ("value", "local")], 400,
         "&#39;mode&#39; is not a setting a knowledge base may override"),
    ]:
        refused = await post(console, "/admin/kbs", fields)
        assert refused.status_code == status, (fields, refused.text[:300])
        alert = must_find(r'<p class="error" role="alert">(.*?)</p>', refused.text).group(1)
        assert said in alert, alert
        assert 'id="create-kb"' in refused.text and "<html" in refused.text   # the page, with its form
        typed = fields[0][1]
        assert f'name="name" value="{typed}"' in refused.text  # what was typed stays
    assert registry(console).names() == before

    unchecked = await console.post("/admin/kbs", data={"name": "nocsrf"})
    assert unchecked.status_code == 403 and "nocsrf" not in registry(console).names()


async def test_deleting_a_base_needs_its_name_typed(console: httpx.AsyncClient, settings: Settings) -> None:
    await create(console, "hr")
    await upload_to(console, "hr", ("team.txt", TEAM))
    directory = registry(console).directory("hr")
    assert directory.is_dir()
    page = await console.get("/admin/kbs/hr", params={"kb": "hr"})
    assert 'action="/admin/kbs/hr/delete?kb=hr"' in page.text

    for typed, said in [("", "type the base&#39;s name, hr, to delete it"),
                        ("HR", "&#39;HR&#39; is not &#39;hr&#39;: nothing was deleted")]:
        refused = await post(console, "/admin/kbs/hr/delete?kb=hr", {"confirm": typed})
        assert refused.status_code == 400
        assert said in must_find(r'<p class="error" role="alert">(.*?)</p>', refused.text).group(1)
        assert "hr" in registry(console).names() and directory.is_dir()
    documents = await console.get("/admin/documents", params={"kb": "hr"})
    assert "team.txt" in documents.text

    deleted = await post(console, "/admin/kbs/hr/delete?kb=hr", {"confirm": "hr"})
    # the list, on default: the base this page was on is gone, so the address no longer names it
    assert deleted.status_code == 303 and deleted.headers["location"] == "/admin/kbs"
    assert registry(console).names() == ["default"] and not directory.exists()
    assert (await console.get("/admin/documents", params={"kb": "hr"})).status_code == 404

    default_page = await console.get("/admin/kbs/default")
    assert default_page.status_code == 200 and "/delete" not in default_page.text
    refused = await post(console, "/admin/kbs/default/delete", {"confirm": "default"})
    assert refused.status_code == 409 and "cannot be deleted" in refused.text
    assert (await console.get("/admin/kbs/nope")).status_code == 404


async def test_a_document_uploaded_on_hr_shows_on_hr_only(console: httpx.AsyncClient) -> None:
    await create(console, "hr")
    uploaded = await upload_to(console, "hr", ("handbook.txt", TEAM))
    assert 'href="/admin/documents/' in uploaded.text and stray_urls(uploaded.text, "hr") == []
    await upload_to(console, "default", ("club.txt", CLUB), htmx=False)

    hr_page = (await console.get("/admin/documents", params={"kb": "hr"})).text
    default_page = (await console.get("/admin/documents")).text
    assert "handbook.txt" in hr_page and "club.txt" not in hr_page
    assert "club.txt" in default_page and "handbook.txt" not in default_page
    hr_dashboard = (await console.get("/admin/", params={"kb": "hr"})).text
    assert must_find(r"<strong>(\d+)</strong> documents?\b", hr_dashboard).group(1) == "1"
    hr_entities = (await console.get("/admin/entities", params={"kb": "hr"})).text
    assert "Alice Smith" in hr_entities and "Carol White" not in hr_entities


async def test_what_a_link_carries_and_what_it_leaves() -> None:
    """``link`` on the URLs the templates write: console URLs only, a base named already left alone."""
    link, kb_field = links_for("hr")["link"], links_for("hr")["kb_field"]
    assert link("?page=2&q=a%20b") == "?page=2&q=a%20b&kb=hr"
    assert link("/admin/entities/x#relations") == "/admin/entities/x?kb=hr#relations"
    assert link("/admin/merge?key=a&key=b") == "/admin/merge?key=a&key=b&kb=hr"
    # a URL assembled in a template block comes escaped (Markup): its text is the URL
    assert link(Markup("/admin/merge?key=a&amp;target=b")) == "/admin/merge?key=a&target=b&kb=hr"
    for kept in ("/admin/static/console.css", "https://example.org/admin/", "//example.org/admin/",
                 "/admin/documents?kb=default", "#relations"):
        assert link(kept) == kept
    assert kb_field() == '<input type="hidden" name="kb" value="hr">'
    assert links_for('a"b')["kb_field"]() == '<input type="hidden" name="kb" value="a&#34;b">'
    assert links_for(None)["link"]("/admin/documents") == "/admin/documents" and links_for(None)["kb_field"]() == ""


# after a space, or right after a template tag (``{% if busy %}hx-get="..."``)
URL_ATTRIBUTE = re.compile(r'[\s}](' + "|".join(URL_ATTRIBUTES) + r')="([^"]*)"')
FORM_TAG = re.compile(r"<form\b[^<>]*>(\{\{ kb_field\(\) \}\})?", re.DOTALL)


def unlinked(name: str, template: str) -> list[str]:
    """A template's console URLs not written through ``link`` (a GET form's own URL aside: its
    fields make it), and its GET forms without ``kb_field()`` (but the switcher, which names a base)."""
    found = []
    get_forms = [(m.start(), m.end()) for m in FORM_TAG.finditer(template)
                 if 'method="get"' in m.group(0) or "method=" not in m.group(0)]
    for m in URL_ATTRIBUTE.finditer(template):
        attribute, url = m.groups()
        in_get_form = any(a <= m.start() < b for a, b in get_forms) and attribute in ("action", "hx-get")
        if (url.startswith(("/admin", "?")) or "{{" in url) and not url.startswith("{{ link(") and not in_get_form:
            found.append(f"{name}: {attribute}={url!r}")
    for m in FORM_TAG.finditer(template):
        tag = m.group(0)
        if ('method="get"' in tag or "method=" not in tag) and "kb-switch" not in tag and not m.group(1):
            found.append(f"{name}: {tag[:60]!r} without kb_field()")
    return found


def test_every_template_writes_its_console_urls_through_link() -> None:
    templates = Path(__file__).resolve().parents[1] / "templates"
    assert [miss for path in sorted(templates.glob("*.html")) for miss in unlinked(path.name, path.read_text())] == []
    planted = ('<a href="/admin/documents">x</a><div hx-post="{{ link(\'/admin/a\') }}"></div>'
               '<div {% if busy %}hx-get="/admin/b"{% endif %}></div>'
               '<form method="get" action="/admin/entities"><input name="q"></form>')
    assert unlinked("planted.html", planted) == [
        "planted.html: href='/admin/documents'", "planted.html: hx-get='/admin/b'",
        "planted.html: '<form method=\"get\" action=\"/admin/entities\">' without kb_field()"]


async def test_a_base_deleted_in_the_console_is_taken_out_of_its_keys(console: httpx.AsyncClient) -> None:
    await create(console, "hr")
    await create(console, "eng")
    keys = console._transport.app.state.gateway.keys  # type: ignore[attr-defined]
    key, _ = await keys.create("both", "read", ["hr", "eng"], registry(console).names())
    # a stored key closes the password-less console to loopback clients (issue 29, item 4): an admin key logs in
    _, owner = await keys.create("owner", "admin", None, registry(console).names())
    login = must_find(r'name="csrf" value="([^"]+)"', (await console.get("/admin/login")).text).group(1)
    assert (await console.post("/admin/login", data={"csrf": login, "key": owner})).status_code == 303
    deleted = await post(console, "/admin/kbs/hr/delete", {"confirm": "hr"})
    assert deleted.status_code == 303
    assert tuple(keys.keys[key.id].kbs) == ("eng",)   # a base made later under the name is not the key's


async def test_changing_a_bases_settings_in_the_console(console: httpx.AsyncClient) -> None:
    made = await post(console, "/admin/kbs", [("name", "code"), ("setting", "language"), ("value", "German")])
    assert made.status_code == 303
    page = await console.get("/admin/kbs/code", params={"kb": "code"})
    assert 'action="/admin/kbs/code/settings?kb=code"' in page.text
    assert 'name="language" value="German"' in page.text and 'name="chunk_tokens" value=""' in page.text

    # a filled field sets, an empty one removes (the gateway's value then applies)
    changed = await post(console, "/admin/kbs/code/settings?kb=code",
                         {"entity_types": "Module, Function", "chunk_tokens": "600", "language": ""})
    assert changed.status_code == 303 and changed.headers["location"] == "/admin/kbs/code?kb=code"
    assert registry(console).bases["code"].overrides == {"entity_types": ["Module", "Function"], "chunk_tokens": 600}
    table = settings_table((await console.get("/admin/kbs/code")).text)
    assert table["entity_types"] == ("Module, Function", "this base") and table["language"][1] == "the gateway"
    assert (await console.get("/rag/kbs/code")).json()["effective"]["chunk_tokens"] == 600

    # refused as a whole, said above the form with what was typed; nothing changes
    for fields, said in [({"chunk_tokens": "600", "chunk_overlap": "700"}, "must be below settings.chunk_tokens"),
                         ({"gleaning": "9"}, "settings.gleaning: invalid value")]:
        refused = await post(console, "/admin/kbs/code/settings", fields)
        assert refused.status_code == 400
        assert said in must_find(r'<p class="error" role="alert">(.*?)</p>', refused.text).group(1)
        for key, value in fields.items():
            assert f'name="{key}" value="{value}"' in refused.text
        assert registry(console).bases["code"].overrides == {"entity_types": ["Module", "Function"],
                                                             "chunk_tokens": 600}

    default = await console.get("/admin/kbs/default")
    assert 'id="settings-form"' not in default.text and "runs with the gateway" in default.text
    refused = await post(console, "/admin/kbs/default/settings", {"language": "German"})
    assert refused.status_code == 409 and "runs with the gateway&#39;s own settings" in refused.text


async def test_a_base_whose_list_entry_was_edited_into_a_bad_override_says_so_and_is_mended(
        console: httpx.AsyncClient) -> None:
    await create(console, "broken")
    registry(console).bases["broken"].overrides = {"chunk_tokens": "lots"}   # as if the file had been edited
    page = await console.get("/admin/kbs/broken")
    assert page.status_code == 200
    said = must_find(r'<p class="error" role="alert">(.*?)</p>', page.text).group(1)
    assert "settings.chunk_tokens: invalid value &#39;lots&#39;" in said and "cannot open" in said
    assert 'name="chunk_tokens" value="lots"' in page.text
    mended = await post(console, "/admin/kbs/broken/settings", {"chunk_tokens": ""})
    assert mended.status_code == 303 and registry(console).bases["broken"].overrides == {}
    assert (await console.get("/admin/documents", params={"kb": "broken"})).status_code == 200
