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
from proxy.merging.resolution import abbreviates, introductions
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
    assert [s for s, _, _ in introductions("VG: Vantor Group's own name for itself.", ["Vantor Group"])] == ["VG"]
    assert [s for s, _, _ in introductions("北京大学（简称北大）位于北京。", ["北京大学"])] == ["北大"]
    assert [s for s, _, _ in introductions("克拉冯兄弟（KVB）在里斯本开设了工厂。", ["克拉冯兄弟"])] == ["KVB"]
    assert [s for s, _, _ in introductions("北大，即北京大学，位于北京。", ["北京大学"])] == ["北大"]
    # the model may write the name another way than the text (case, a legal form): the text's is found
    assert [s for s, _, _ in introductions("Kravon Dynamics (KVD) grew.", ["KRAVON DYNAMICS Inc."])] == ["KVD"]
    assert introductions("Kravonix (KX) hired.", ["Kravon"]) == []   # not inside a longer word


@pytest.mark.parametrize(("short", "full", "expected"), [
    ("KVD", "Kravon Dynamics", True), ("KXZ", "Kravon Dynamics", True),    # an acronym by its first letter
    ("Kravon", "Kravon Dynamics", True),                                     # the name's letters in order
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
