"""Entity resolution at ingestion (proxy/merging/resolution.py): spellings of one name and a short
form a text introduces become one entity, automatically, with the evidence kept and an undo; what
does not look like a short form links nothing. Real engines, the scripted model of tests/extractor.py."""

from __future__ import annotations

import html
import re

import anyio.to_thread
import httpx
import pytest

from proxy.core.names import normalised
from proxy.core.settings import Settings
from proxy.extraction.results import ExtractedEntity, ExtractionResult
from proxy.merging.resolution import SAME_NAME, Known, abbreviates, introductions, resolve_batch
from proxy.store.changes import pair_key
from tests.conftest import gateway_client
from tests.console_helpers import post, ref
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store
from tests.matching import must_find
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio


# --- the evidence in a text -------------------------------------------------------------------


def test_a_short_form_in_brackets_or_set_off_before_the_name_is_an_introduction() -> None:
    text = ("Kravon Dynamics (KVD) opened a plant in Lisbon. KVD, short for Kravon Dynamics, signed with "
            "Lintel. Lintel, a partner of Kravon Dynamics, grew. Kravon Dynamics (Berlin) hired.")
    found = introductions(text, ["Kravon Dynamics", "Lintel"])
    assert [(short, full) for short, full, _ in found] == [("KVD", "Kravon Dynamics"), ("KVD", "Kravon Dynamics")]
    assert found[0][2] == "Kravon Dynamics (KVD) opened a plant in Lisbon."
    assert found[1][2].startswith("KVD, short for Kravon Dynamics")


def test_other_wording_and_other_scripts_introduce_the_same_way() -> None:
    assert [s for s, _, _ in introductions("VG, as Vantor Group calls itself, grew.", ["Vantor Group"])] == ["VG"]
    assert [s for s, _, _ in introductions("北京大学（简称北大）位于北京。", ["北京大学"])] == ["北大"]
    assert [s for s, _, _ in introductions("克拉冯兄弟（KVB）在里斯本开设了工厂。", ["克拉冯兄弟"])] == ["KVB"]
    assert [s for s, _, _ in introductions("北大，即北京大学，位于北京。", ["北京大学"])] == ["北大"]
    # the model may write the name another way than the text (case, a legal form): the text's is found
    assert [s for s, _, _ in introductions("Kravon Dynamics (KVD) grew.", ["KRAVON DYNAMICS Inc."])] == ["KVD"]


PROSE = ["In Washington, Washington Post reported.", "Back in Boston, Boston Dynamics hired.",
         "Exports to Austria, Australia grew.", "Niger, Nigeria and Chad met.", "在北京，北京大学宣布。",
         "美国，美国国务院说。", "Mira Okafor (MIT) spoke.", "Chen Li (CMU) spoke.", "中国银行（中国）开业。",
         "北京大学（位于北京）开学。", "Kravon Dynamics (see Kravon) grew.", "Kravon Dynamics (2019) grew.",
         "Kravonix (KX) hired."]
PROSE_NAMES = ["Washington Post", "Washington", "Boston", "Boston Dynamics", "Austria", "Australia", "Niger",
               "Nigeria", "北京", "北京大学", "美国", "美国国务院", "Mira Okafor", "MIT", "Chen Li", "CMU", "中国银行",
               "中国", "Kravon Dynamics", "Kravon"]


@pytest.mark.parametrize("sentence", PROSE)
def test_lists_places_and_affiliations_introduce_nothing(sentence: str) -> None:
    """A name beside another with nothing between, a place or a person's institute in brackets: no
    short form of it (merging those would join two things)."""
    assert introductions(sentence, PROSE_NAMES) == []


@pytest.mark.parametrize(("short", "full", "expected"), [
    ("KVD", "Kravon Dynamics", True), ("KD", "Kravon Dynamics", True),      # the name's letters in order
    ("KXZ", "Kravon Dynamics", False),                                       # letters the name does not have
    ("Kravon", "Kravon Dynamics", False), ("北京", "北京大学", False),        # its leading word names more
    ("Kent", "Kravon Dynamics", False),                                      # a word that is no short form
    ("Lisbon", "Kravon Dynamics", False), ("K", "Kravon Dynamics", False),
    ("KRAVON DYNAMICS", "Kravon Dynamics", False),                          # the name itself
    ("北大", "北京大学", True), ("北京", "上海大学", False),
])
def test_what_a_short_form_looks_like(short: str, full: str, expected: bool) -> None:
    assert abbreviates(short, full) is expected


def test_legal_forms_and_articles_fold_in_every_script() -> None:
    assert normalised("The Kravon Brothers Ltd") == normalised("KRAVON BROTHERS GmbH") == "kravon brothers"
    assert normalised("华为技术有限公司") == normalised("华为技术")
    assert normalised("株式会社ソニー") == normalised("ソニー")
    assert normalised("公司") == "公 司"   # a name that is only a legal form keeps it


# --- deciding the links of a batch ------------------------------------------------------------


def chunk(*entities: tuple[str, str]) -> ExtractionResult:
    return ExtractionResult(tuple(ExtractedEntity(name, kind, f"{name}.") for name, kind in entities))


def stored(*entries: tuple[str, str, str]) -> Known:
    """A store holding these (key, spelling, type) entities."""
    by_core: dict[str, list[tuple[str, str, str]]] = {}
    for key, spelling, kind in entries:
        by_core.setdefault(normalised(spelling), []).append((key, spelling, kind))
    keys = {key for key, _, _ in entries}
    return Known(keys.__contains__, lambda core: by_core.get(core, []), {}, set())


def test_a_spelling_folds_only_into_the_same_kind_of_thing_with_the_same_core() -> None:
    added = {"c1": chunk(("The Kravon Ltd", "Organization"), ("Hepatitis A", "Concept"),
                         ("East India Company", "Organization"))}
    known = stored(("kravon", "Kravon", "Organization"), ("hepatitis", "Hepatitis", "Concept"),
                   ("east india", "East India", "Location"))
    links = resolve_batch(added, {}, known).links
    assert [(link.alias, link.target, link.reason) for link in links] == [("the kravon ltd", "kravon", SAME_NAME)]


def test_links_point_at_the_end_of_their_chain_and_a_dismissed_pair_stays_apart() -> None:
    text = "Kravon Dynamics (KRD) opened in Lisbon."
    added = {"c1": chunk(("Kravon Dynamics", "Organization"), ("KRD Ltd", "Organization")),
             "c2": chunk(("Kravon Dynamics Inc.", "Organization"))}
    intros = {"c1": introductions(text, ["Kravon Dynamics"])}
    resolution = resolve_batch(added, intros, stored())
    targets = {link.alias: link.target for link in resolution.links}
    assert targets["krd"] == "kravon dynamics" and targets["kravon dynamics inc."] == "kravon dynamics"
    assert all(target not in targets for target in targets.values())   # no alias of an alias
    # the short form stored as another spelling, its pair dismissed by hand: no merge
    known = stored(("krd ltd", "KRD Ltd", "Organization"), ("kravon dynamics", "Kravon Dynamics", "Organization"))
    assert resolve_batch({"c1": chunk(("Kravon Dynamics", "Organization"))}, intros, known).merges[0].alias == "krd ltd"
    known.dismissed.add(pair_key("krd ltd", "kravon dynamics"))
    assert resolve_batch({"c1": chunk(("Kravon Dynamics", "Organization"))}, intros, known).merges == []


# --- at ingestion ---------------------------------------------------------------------------


NAMES = {"Kravon Dynamics": "Organization", "KVD": "Organization", "The Kravon Dynamics Ltd": "Organization",
         "Lisbon": "Location", "Mira Okafor": "Person", "Tessaly Works": "Organization", "Osk Harbour": "Location"}
INTRODUCED = "Kravon Dynamics (KVD) opened a plant in Lisbon."
SHORT_ONLY = "Mira Okafor chairs KVD."
VARIANT = "The Kravon Dynamics Ltd employs 4,270 people near Osk Harbour."
UNRELATED = "Tessaly Works builds cranes in Osk Harbour."


def entity_names(client: httpx.AsyncClient) -> set[str]:
    kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
    return {r[0] for r in kb.store.tables.db.read_sync(lambda c: c.execute("SELECT name FROM entities").fetchall())}


async def ingest(client: httpx.AsyncClient, *texts: str) -> None:
    for number, text in enumerate(texts):   # one at a time: the order is the test's
        document = await upload(client, f"doc{number}-{abs(hash(text))}.txt", text)
        assert (await settle(client, document["id"]))["status"] == "processed"


@pytest.mark.parametrize("order", ["introduced first", "short form first"])
async def test_the_short_form_and_the_spellings_become_one_entity_with_evidence(
        settings: Settings, fake: FakeOllama, order: str) -> None:
    fake.structured = KnownFacts(NAMES)
    texts = [INTRODUCED, SHORT_ONLY, VARIANT, UNRELATED]
    if order == "short form first":
        texts = [SHORT_ONLY, VARIANT, UNRELATED, INTRODUCED]
    async with gateway_client(settings, fake) as client:
        await ingest(client, *texts)
        cores = {normalised(name) for name in entity_names(client)}
        assert cores == {"kravon dynamics", "lisbon", "mira okafor", "tessaly works", "osk harbour"}
        entity = (await client.get("/rag/entities/KVD")).json()
        assert normalised(entity["name"]) == "kravon dynamics" and entity["resolved_from"] == "KVD"
        why = {item["alias"]: item for item in entity["resolved"]}
        assert why["kvd"]["reason"] == "abbreviation" and why["kvd"]["evidence"] == INTRODUCED
        assert len(why) == 2, why
        assert {"same name"} == {item["reason"] for alias, item in why.items() if alias != "kvd"}
        # what each document says of the company is one entity's: its chair, its headcount, its plant
        found = str(await query(client, query="Who chairs KVD?", mode="local", only_need_context=True))
        assert "Mira Okafor" in found and "Lisbon" in found and "4,270" in found
    await anyio.to_thread.run_sync(check_store, settings.data_dir)


async def test_an_undo_splits_the_alias_off_and_resolution_leaves_it_apart(
        settings: Settings, fake: FakeOllama) -> None:
    fake.structured = KnownFacts(NAMES)
    async with gateway_client(settings, fake) as client:
        await ingest(client, INTRODUCED, SHORT_ONLY)
        assert "KVD" not in entity_names(client)
        undone = await client.delete("/rag/aliases/KVD")
        assert undone.status_code == 200, undone.text
        assert {"KVD", "Kravon Dynamics"} <= entity_names(client)
        kvd = (await client.get("/rag/entities/KVD")).json()
        assert "resolved_from" not in kvd and kvd["name"] == "KVD"
        assert "Mira Okafor chairs KVD." in kvd["description"]
        full = (await client.get("/rag/entities/Kravon Dynamics")).json()
        assert full["resolved"] == [] and "kvd" not in full["aliases"]
        # the same evidence again does not fold them back
        await ingest(client, "Kravon Dynamics (KVD) is hiring in Lisbon.")
        assert {"KVD", "Kravon Dynamics"} <= entity_names(client)
        again = await client.delete("/rag/aliases/KVD")
        assert again.status_code == 404 and "no alias" in again.json()["error"]


async def test_resolution_can_be_turned_off(settings: Settings, fake: FakeOllama) -> None:
    fake.structured = KnownFacts(NAMES)
    async with gateway_client(settings.replace(entity_resolution=False), fake) as client:
        await ingest(client, INTRODUCED, SHORT_ONLY, VARIANT)
        assert {"KVD", "Kravon Dynamics", "The Kravon Dynamics Ltd"} <= entity_names(client)


async def test_the_console_shows_the_evidence_and_undoes_the_merge(settings: Settings, fake: FakeOllama) -> None:
    fake.structured = KnownFacts(NAMES)
    async with gateway_client(settings, fake) as client:
        await ingest(client, INTRODUCED, SHORT_ONLY)
        page = await client.get(f"/admin/entities/{ref('kravon dynamics')}")
        assert page.status_code == 200 and "Merged automatically" in page.text
        row = must_find(r'<table id="resolved">.*?</table>', page.text, re.S).group(0)
        assert "kvd" in row and "abbreviation" in row and html.escape(INTRODUCED) in row
        undo = f"/admin/entities/{ref('kravon dynamics')}/aliases/{ref('kvd')}/undo"
        assert f'action="{undo}"' in row
        done = await post(client, undo)
        assert done.status_code == 303 and done.headers["location"] == f"/admin/entities/{ref('kravon dynamics')}"
        assert {"KVD", "Kravon Dynamics"} <= entity_names(client)
        page = await client.get(f"/admin/entities/{ref('kravon dynamics')}")
        assert "Merged automatically" not in page.text and "is its own entity again" in page.text
        missing = await post(client, undo)   # undone already: a readable refusal, nothing changes
        assert missing.status_code == 404 and "no alias" in missing.text
        assert {"KVD", "Kravon Dynamics"} <= entity_names(client)


async def test_an_alias_goes_with_the_documents_of_its_entity(settings: Settings, fake: FakeOllama) -> None:
    """Resolution's alias is evidence from documents: once they are all deleted it goes too, and a
    later document naming only the short form makes an entity of that name (not one keyed by the
    full name it no longer has evidence for)."""
    fake.structured = KnownFacts(NAMES)
    async with gateway_client(settings, fake) as client:
        ids = [(await upload(client, f"doc{i}.txt", text))["id"] for i, text in enumerate((INTRODUCED, SHORT_ONLY))]
        for document_id in ids:
            assert (await settle(client, document_id))["status"] == "processed"
        assert (await client.get("/rag/entities/KVD")).json().get("resolved_from") == "KVD"
        for document_id in ids:
            assert (await client.delete(f"/rag/documents/{document_id}")).status_code == 200
        assert (await client.get("/rag/entities/KVD")).status_code == 404
        await ingest(client, "KVD opened an office in Osk Harbour.")
        kvd = (await client.get("/rag/entities/KVD")).json()
        assert kvd["name"] == "KVD" and "resolved_from" not in kvd
        assert (await client.delete("/rag/aliases/KVD")).status_code == 404


def test_chinese_introductions_as_chinese_texts_write_them() -> None:
    """A quoted short form (the formal 以下简称“X”), and a name whose legal form the core leaves out
    before the brackets (issue 32's Chinese shapes world: 5 of 20 short forms were linked)."""
    cases = {"梅朵兹实业有限公司（以下简称“梅实”）成立于1990年。": ("梅实", "梅朵兹实业有限公司"),
             "宁贝温伙伴有限公司（NLP）在里斯本开设了工厂。": ("NLP", "宁贝温伙伴有限公司"),
             "瓦瓦宁协力股份有限公司（简称瓦协）签署了协议。": ("瓦协", "瓦瓦宁协力股份有限公司"),
             "朵朵恩协力股份有限公司（以下简称“DAI”）成立。": ("DAI", "朵朵恩协力股份有限公司"),
             "Kravon Dynamics Inc. (KVD) opened a plant.": ("KVD", "Kravon Dynamics Inc.")}
    for text, (short, name) in cases.items():
        assert [(s, n) for s, n, _ in introductions(text, [name])] == [(short, name)], text


def test_chinese_group_holding_and_cooperative_forms_and_name_dots_fold() -> None:
    assert normalised("冉泰姆重工集团") == normalised("冉泰姆重工") == normalised("冉泰姆重工（集团）")
    assert normalised("索詹隆联合控股") == normalised("索詹隆联合")
    assert normalised("珍贝柯兄弟集团有限公司") == normalised("珍贝柯兄弟")
    assert normalised("集团") == "集 团"   # a name that is only a legal form keeps it
    dots = {normalised(name) for name in ("贝温尔・涅泰蒂", "贝温尔·涅泰蒂", "贝温尔•涅泰蒂", "贝温尔涅泰蒂")}
    assert len(dots) == 1
