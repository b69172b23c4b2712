"""The console in-process: pages and fragments, uploads, entities, merges, suggestions, graph,
escaping of untrusted text, and what bad input gets. Real engines; the scripted model."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.console_helpers import post, ref, settled, upload_texts
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import in_memory
from tests.matching import must_find

pytestmark = pytest.mark.anyio


@pytest.fixture
async def console(settings: Settings, fake: FakeOllama, facts: KnownFacts):
    async with gateway_client(settings, fake) as client:
        yield client


def kb(client: httpx.AsyncClient):
    return client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]


async def test_every_page_renders_on_an_empty_store_with_helpful_empty_states(console: httpx.AsyncClient) -> None:
    for path, text in [("/admin/", "Idle"), ("/admin/documents", "No documents yet"),
                       ("/admin/entities", "No entities yet"), ("/admin/suggestions", "No suggestions"),
                       ("/admin/graph", "The graph is empty"), ("/admin/merge", "Nothing picked yet"),
                       ("/admin/settings", "GRAPHGATE_ADMIN_PASSWORD")]:
        response = await console.get(path)
        assert response.status_code == 200, path
        assert text in response.text, path
        assert "No console password is set" in response.text  # the open-console banner
    assert (await console.get("/admin")).headers["location"].endswith("/admin/")


async def test_upload_reports_each_file_and_the_table_shows_them_processed(console: httpx.AsyncClient) -> None:
    response = await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY), ("empty.txt", ""))
    assert response.status_code == 200 and "<html" not in response.text  # a fragment for htmx
    outcomes = re.findall(r'class="badge (\w+)">\w+</span> ([\w.]+)', response.text)
    assert outcomes == [("accepted", "team.txt"), ("accepted", "city.md"), ("rejected", "empty.txt")]
    assert "empty" in response.text.split("empty.txt", 1)[1]  # the reason is given
    again = await upload_texts(console, ("team-copy.txt", TEAM))
    assert 'class="badge duplicate"' in again.text and "team.txt" in again.text
    await settled(console)

    page = await console.get("/admin/documents")
    assert page.text.count('data-status="processed"') == 2
    fragment = await console.get("/admin/documents?q=city", headers={"HX-Request": "true",
                                                                     "HX-Target": "document-table"})
    assert "<html" not in fragment.text and "city.md" in fragment.text and "team.txt" not in fragment.text
    failed = await console.get("/admin/documents?status=failed")
    assert "No documents match" in failed.text
    assert (await console.get("/admin/documents?status=bogus")).status_code == 400
    assert (await console.get("/admin/documents?page=0")).status_code == 400


async def test_an_upload_posted_before_htmx_ran_gets_a_page_that_targets_nothing_it_lacks(
        console: httpx.AsyncClient) -> None:
    """A click on Upload before the page's scripts ran (a slow machine) posts the plain form: the
    answer is a whole page with the results, and no element on it asks htmx to refresh a documents
    table the page does not have (htmx reported a targetError)."""
    files = [("files", ("team.txt", TEAM.encode(), "text/plain"))]
    response = await post(console, "/admin/documents", files=files)
    assert response.status_code == 200 and "<html" in response.text
    assert re.search(r'id="upload-results">\s*<ul class="results">\s*<li><span class="badge accepted">', response.text)
    ids = set(re.findall(r'\bid="([^"]+)"', response.text))
    targets = set(re.findall(r'hx-target="#([^"]+)"', response.text))
    assert targets <= ids, targets - ids
    await settled(console)


async def test_document_page_shows_chunks_with_what_each_yielded_and_delete_confirms(
        console: httpx.AsyncClient) -> None:
    await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY))
    await settled(console)
    doc_id = must_find(r'data-id="(doc-\w+)" data-status="processed">\s*<td><a [^>]*>team.txt',
                       (await console.get("/admin/documents")).text).group(1)
    page = await console.get(f"/admin/documents/{doc_id}")
    assert "Alice Smith leads the Orion project." in page.text and "Chunk 1" in page.text
    assert "Orion — Acme Corp" in page.text or "Alice Smith — Orion" in page.text
    confirm = await console.get(f"/admin/documents/{doc_id}/delete")
    # the team document alone sources Alice, Bob and Orion; Acme Corp keeps its city chunk
    assert "3 entities removed, 1 updated" in confirm.text
    assert (await post(console, f"/admin/documents/{doc_id}/delete", csrf=False)).status_code == 403
    assert (await console.get(f"/admin/documents/{doc_id}")).status_code == 200
    done = await post(console, f"/admin/documents/{doc_id}/delete")
    assert done.status_code == 303
    assert (await console.get(f"/admin/documents/{doc_id}")).status_code == 404
    assert "Orion" not in (await console.get("/admin/entities")).text


async def test_entity_list_search_sort_and_fragment(console: httpx.AsyncClient) -> None:
    await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY))
    await settled(console)
    page = await console.get("/admin/entities")
    names = re.findall(r'<td><a href="/admin/entities/[\w-]+">([^<]+)</a></td>', page.text)
    assert names[0] == "Acme Corp" and len(names) == 6  # highest degree first
    by_name = await console.get("/admin/entities?sort=name&order=asc")
    assert re.findall(r'<td><a href="/admin/entities/[\w-]+">([^<]+)</a></td>', by_name.text) == sorted(names)
    found = await console.get("/admin/entities?q=ali", headers={"HX-Request": "true", "HX-Target": "entity-table"})
    assert "<html" not in found.text and "Alice Smith" in found.text and "Bob Jones" not in found.text
    stored = dict(kb(console).store.tables.db.read_sync(
        lambda c: c.execute("SELECT name, description FROM entities").fetchall()))
    listed = re.findall(r'<td><a href="/admin/entities/[\w-]+">([^<]+)</a></td>.*?<small>([^<]*)</small>', page.text,
                        re.S)
    assert len(listed) == 6 and all(shown and shown == stored[name] for name, shown in listed)  # read per page
    typed = await console.get("/admin/entities?type=Location")
    assert re.findall(r'<td><a href="/admin/entities/[\w-]+">([^<]+)</a></td>', typed.text) == ["Berlin"]
    hostile = await console.get("/admin/entities", params={"q": "%' OR 1=1 --"})
    assert hostile.status_code == 200 and "No entities match" in hostile.text


async def test_entity_page_edit_and_rename_onto_existing_offers_merge(console: httpx.AsyncClient) -> None:
    await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY))
    await settled(console)
    orion = f"/admin/entities/{ref('orion')}"
    page = await console.get(orion)
    assert page.status_code == 200 and "Alice Smith" in page.text
    svg = page.text[page.text.index("<svg"):page.text.index("</svg>") + 6]
    ET.fromstring(svg)  # well-formed
    assert 'data-key="alice smith"' in svg
    edited = await post(console, orion, {"name": "Orion", "type": "Project", "description": "A rocket."})
    assert edited.status_code == 303
    assert ("Project", "A rocket.") == kb(console).store.tables.db.read_sync(
        lambda c: c.execute("SELECT type, description FROM entities WHERE name_key = 'orion'").fetchone())
    clash = await post(console, orion, {"name": "acme corp", "type": "", "description": "x"})
    assert clash.status_code == 409 and "Merge them" in clash.text and "/admin/merge?key=" in clash.text
    assert in_memory(kb(console).store)[1].has("orion")  # nothing changed
    assert (await console.get(f"/admin/entities/{ref('nobody')}")).status_code == 404
    assert (await console.get("/admin/entities/%%%")).status_code in (400, 404)


async def test_merge_through_the_preview(console: httpx.AsyncClient) -> None:
    await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY))
    await settled(console)
    keys = [("key", ref("orion")), ("key", ref("acme corp"))]
    pick = await console.get("/admin/merge", params=tuple(keys))
    assert 'value="' + ref("acme corp") + '" checked' in pick.text  # the best connected is kept by default
    form = [*keys, ("target", ref("acme corp")), ("name", ""), ("type", ""), ("description", "")]
    preview = await post(console, "/admin/merge/preview", form, htmx=True)
    assert preview.status_code == 200 and "<html" not in preview.text
    assert "1 self-loop dropped" in preview.text and "Alice Smith" in preview.text
    assert in_memory(kb(console).store)[1].has("orion")  # the preview wrote nothing
    done = await post(console, "/admin/merge", form)
    assert done.status_code == 303 and done.headers["location"] == f"/admin/entities/{ref('acme corp')}"
    assert not in_memory(kb(console).store)[1].has("orion")
    page = await console.get(done.headers["location"])
    assert "Also known as" in page.text and "orion" in page.text
    bad = await post(console, "/admin/merge/preview", [("key", ref("acme corp")), ("target", ref("acme corp"))])
    assert bad.status_code == 400 and "nothing to merge" in bad.text


async def test_suggestions_merge_and_dismiss(settings: Settings, fake: FakeOllama) -> None:
    fake.structured = KnownFacts({"Acme Corp": "Organization", "ACME Corporation": "Organization",
                                  "Initech": "Organization", "Initech Ltd": "Organization"})
    async with gateway_client(settings.replace(entity_resolution=False), fake) as client:   # else folded
        await upload_texts(client, ("a.txt", "Acme Corp sells anvils. ACME Corporation was founded in 1920. "
                                             "Initech makes software. Initech Ltd is in Texas."))
        await settled(client)
        page = await client.get("/admin/suggestions")
        assert page.text.count('class="card suggestion"') == 2 and "same name" in page.text
        dismissed = await post(client, "/admin/suggestions/dismiss", [("key", ref("initech")),
                                                                      ("key", ref("initech ltd"))], htmx=True)
        assert dismissed.status_code == 200 and dismissed.text == ""
        page = await client.get("/admin/suggestions")
        assert page.text.count('class="card suggestion"') == 1 and "Initech" not in page.text
        merged = await post(client, "/admin/merge", [("key", ref("acme corp")), ("key", ref("acme corporation")),
                                                     ("target", ref("acme corp"))])
        assert merged.status_code == 303
        assert "No suggestions" in (await client.get("/admin/suggestions")).text


async def test_graph_page_draws_neighbourhood_and_rejects_bad_knobs(console: httpx.AsyncClient) -> None:
    await upload_texts(console, ("team.txt", TEAM), ("city.md", CITY))
    await settled(console)
    page = await console.get("/admin/graph", params={"entity": ref("berlin"), "depth": "1"})
    svg = ET.fromstring(page.text[page.text.index("<svg"):page.text.index("</svg>") + 6])
    keys = {g.get("data-key") for g in svg.iter() if g.get("data-key")}
    assert keys == {"berlin", "acme corp", "carol white"}
    deeper = await console.get("/admin/graph", params={"entity": ref("berlin"), "depth": "3"})
    assert deeper.text.count("data-key=") == 6
    assert f"/admin/graph?entity={ref('acme corp')}" in page.text  # nodes re-centre the graph
    for bad in ({"depth": "9"}, {"cap": "x"}, {"entity": ref("nobody")}):
        assert (await console.get("/admin/graph", params=bad)).status_code in (400, 404)


async def test_untrusted_names_and_texts_are_escaped_everywhere(settings: Settings, fake: FakeOllama) -> None:
    evil = "<script>alert(1)</script>"
    fake.structured = KnownFacts({evil: "Person", "Bob": '"><img src=x onerror=alert(2)>'})
    async with gateway_client(settings, fake) as client:
        await upload_texts(client, ("<b>doc.txt", f"{evil} met Bob in town."))
        await settled(client)
        key = kb(client).store.tables.db.read_sync(
            lambda c: c.execute("SELECT name_key FROM entities WHERE name LIKE '<script>%'").fetchone())[0]
        pages = ["/admin/documents", "/admin/entities", f"/admin/entities/{ref(key)}", "/admin/graph",
                 f"/admin/graph?entity={ref(key)}", f"/admin/merge?key={ref(key)}&key={ref('bob')}",
                 "/admin/entities?q=%3Cscript%3E"]
        doc = must_find(r'href="/admin/documents/(doc-\w+)"', (await client.get("/admin/documents")).text).group(1)
        pages.append(f"/admin/documents/{doc}")
        for path in pages:
            text = (await client.get(path)).text
            assert "<script>alert(1)" not in text and "<img src=x" not in text and "<b>doc" not in text, path
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text or "&lt;b&gt;doc.txt" in text, path


async def test_errors_are_pages_not_stack_traces(console: httpx.AsyncClient) -> None:
    missing = await console.get("/admin/documents/doc-nope")
    assert missing.status_code == 404 and "<html" in missing.text and "Traceback" not in missing.text
    fragment = await console.get("/admin/documents/doc-nope", headers={"HX-Request": "true"})
    assert fragment.status_code == 404 and "<html" not in fragment.text
    assert fragment.headers["hx-retarget"] == "#flash"
    wrong_csrf = await console.post("/admin/documents/doc-nope/retry", data={"csrf": "forged"})
    assert wrong_csrf.status_code == 403 and "CSRF" in wrong_csrf.text
