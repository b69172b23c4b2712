"""Entity linking without the model: the store's name index (names and merge aliases compared by
their core, one typo in a long name, spans longest first without overlap), kept in step with
every commit and rebuilt at start-up, and the linked channel behind the ``linking`` knob
(default off: retrieval unchanged). Real engines, the scripted model of tests/extractor.py."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.modes import Mode
from proxy.core.names import name_words, normalised
from proxy.core.settings import Settings
from proxy.retrieval.channels import channels_for
from proxy.retrieval.params import QueryParams
from proxy.store.name_index import ALIAS, EXACT, TYPO, NameIndex, within_one_edit
from proxy.store.store import KnowledgeStore
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import CLASSIC, query, settle, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)


def index(*names: str, aliases: dict[str, str] | None = None) -> NameIndex:
    return NameIndex.build([name.casefold() for name in names], aliases or {})


def linked(names: NameIndex, text: str) -> list[tuple[str, float]]:
    return names.link(name_words(text))


# --- the name index ---

def test_names_match_without_case_punctuation_accents_or_legal_suffixes() -> None:
    names = index("Acme Corp", "Müller GmbH", "Siemens AG")
    for text in ("Where is ACME Inc. based?", "acme ltd", "The Acme Corporation", "acme, LLC", "ACME-Co"):
        assert linked(names, text) == [("acme corp", EXACT)], text
    assert linked(names, "Who owns Muller Ltd?") == [("müller gmbh", EXACT)]
    assert linked(names, "siemens corp and MÜLLER") == [("siemens ag", EXACT), ("müller gmbh", EXACT)]
    assert normalised("ACME Corp.") == "acme" and linked(names, "acme rocket corp") == [("acme corp", EXACT)]


def test_one_typo_in_a_name_of_six_characters_or_more() -> None:
    names = index("Alice Smith", "Berlin", "Orion")
    assert linked(names, "what did Alice Smyth build?") == [("alice smith", TYPO)]   # substitution
    assert linked(names, "alcie smith") == [("alice smith", TYPO)]                    # swap of neighbours
    assert linked(names, "Alice Smiths") == [("alice smith", TYPO)]                   # insertion
    assert linked(names, "who lives in Berln") == [("berlin", TYPO)]                  # deletion
    assert linked(names, "Berlin and Orion") == [("berlin", EXACT), ("orion", EXACT)]
    assert linked(names, "Orien") == []             # five characters: exact names only
    assert linked(names, "Alyce Smyth") == []       # two typos


def test_within_one_edit_is_the_edit_distance_bound() -> None:
    def distance(a: str, b: str) -> int:  # optimal string alignment, the textbook table
        d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
        for i, j in itertools.product(range(1, len(a) + 1), range(1, len(b) + 1)):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
        return d[-1][-1]

    words = ["".join(p) for n in (3, 4, 5) for p in itertools.product("ab", repeat=n)]
    for a, b in itertools.product(words, repeat=2):
        assert within_one_edit(a, b) == (distance(a, b) <= 1), (a, b)


def test_every_name_one_typo_away_is_found() -> None:
    """The halves index against brute force over every single edit of every name."""
    names = ["berlin", "acme rockets", "alice smith", "bank of america", "orion nebula", "carol white"]
    built = index(*names)
    letters = "abcdefghijklmnopqrstuvwxyz "
    for name in names:
        edits = {name[:i] + c + name[i:] for i in range(len(name) + 1) for c in letters}
        edits |= {name[:i] + name[i + 1:] for i in range(len(name))}
        edits |= {name[:i] + c + name[i + 1:] for i in range(len(name)) for c in letters}
        edits |= {name[:i] + name[i + 1] + name[i] + name[i + 2:] for i in range(len(name) - 1)}
        for typo in edits - {name}:
            if " ".join(typo.split()) == typo:  # a span is words joined by single spaces
                assert name in {key for key, _ in built.near(typo)}, (name, typo)


def test_spans_are_longest_first_and_never_overlap() -> None:
    names = index("New York", "York", "New York Times", "Times Square", "Bank of America")
    assert linked(names, "Did the New York Times move to York?") == [("new york times", EXACT), ("york", EXACT)]
    assert linked(names, "new york times square") == [("new york times", EXACT)]  # "times" is taken
    assert linked(names, "new york and times square") == [("new york", EXACT), ("times square", EXACT)]
    assert linked(names, "Bank of America in New York") == [("bank of america", EXACT), ("new york", EXACT)]


def test_function_words_alone_link_nothing() -> None:
    names = index("The Who", "It", "Alice Smith")
    assert linked(names, "Who is it that Alice Smith met?") == [("alice smith", EXACT)]


def test_aliases_link_to_their_target_and_follow_curation() -> None:
    names = index("Acme Corp", "Orion", aliases={"orion project": "orion", "acme rockets": "acme corp"})
    assert linked(names, "the Orion Project") == [("orion", ALIAS)]   # the longer span: the alias
    assert linked(names, "Acme Rocket launch") == [("acme corp", ALIAS * TYPO)]
    names.put_alias("acme rockets", "orion")                          # re-pointed by a later merge
    assert linked(names, "acme rockets") == [("orion", ALIAS)]
    names.drop_aliases_into(["orion"])
    assert linked(names, "acme rockets orion project") == [("acme corp", EXACT), ("orion", EXACT)]
    names.drop_entity("orion")
    assert linked(names, "orion") == [] and linked(names, "acme corp") == [("acme corp", EXACT)]
    assert len(names) == 1


def test_removing_a_name_keeps_its_namesakes() -> None:
    names = index("Acme Corp", "Acme Inc", "Acme Rockets")
    assert linked(names, "acme") == [("acme corp", EXACT), ("acme inc", EXACT)]
    names.drop_entity("acme corp")
    assert linked(names, "ACME") == [("acme inc", EXACT)]
    names.drop_entity("acme rockets")
    assert linked(names, "acme rocketz") == [("acme inc", EXACT)]   # its typo keys went with it



def test_a_numbered_series_links_exactly_and_is_no_typo_of_itself() -> None:
    """Thousands of names sharing a half ("Invoice 10001"...) fill one typo bucket: each still links by
    its own name, drops keep the rest, and one edit between two numbers is no typo; a lone name next
    to the series keeps its typo matching."""
    series = [f"Invoice {n}" for n in range(10_000, 12_000)]
    names = index(*series, "Acme Rockets")
    assert linked(names, "about invoice 10007") == [("invoice 10007", EXACT)]
    assert linked(names, "invoice 10008") == [("invoice 10008", EXACT)]
    assert linked(names, "invoice 1000") == []   # not a name, and no typo of the 2,000 beside it
    for n in range(10_000, 11_990):
        names.drop_entity(f"invoice {n}")
    assert linked(names, "invoice 11995") == [("invoice 11995", EXACT)]
    assert linked(names, "invoice 10007") == []
    assert linked(names, "acme rocketz") == [("acme rockets", TYPO)]
    assert linked(names, "invoice 11994") == [("invoice 11994", EXACT)]
    assert linked(names, "invoice 11993x") == [("invoice 11993", TYPO)]   # ten left: a typo again


# --- kept in step with the store ---

def store_of(client: httpx.AsyncClient) -> KnowledgeStore:
    return client._transport.app.state.gateway.knowledge.store  # type: ignore[attr-defined]


async def ingest(client: httpx.AsyncClient) -> None:
    for name, text in (("team.txt", TEAM), ("city.md", CITY)):
        assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"


@on_both_backends
async def test_the_store_links_names_after_ingestion_merges_deletions_and_restarts(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        store = store_of(client)
        assert store.link_sync("Where is ACME Inc. headquartered?") == []   # nothing ingested yet
        await ingest(client)
        assert store.link_sync("Where is ACME Inc. headquartered?") == [("acme corp", EXACT)]
        assert store.link_sync("Does Alice Smyth lead Orion?") == [("orion", EXACT), ("alice smith", TYPO)]
        merged = await client.post("/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"})
        assert merged.status_code == 200
        assert store.link_sync("the Orion project") == [("acme corp", ALIAS)]
        assert (await client.delete("/rag/entities/berlin")).status_code == 200
        assert store.link_sync("Carol White in Berlin") == [("carol white", EXACT)]
        live = [store.link_sync(text) for text in ("orion", "acme", "berlin", "bob jones")]
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:   # rebuilt at start-up from the tables
        assert [store_of(client).link_sync(text) for text in ("orion", "acme", "berlin", "bob jones")] == live
        assert (await client.delete("/rag/entities/acme corp")).status_code == 200   # drops its aliases too
        assert store_of(client).link_sync("Orion and Acme Corp") == []


# --- the linked channel behind the knob ---


def test_the_linked_channel_runs_only_when_linking_is_on() -> None:
    classic = QueryParams.from_settings(Settings().replace(**CLASSIC))
    on = QueryParams.from_settings(Settings().replace(**CLASSIC), linking="on")
    assert [c.name for c in channels_for(Mode.LOCAL, on)] == ["linked", "described", "entities"]
    assert [c.name for c in channels_for(Mode.MIX, on)] == ["linked", "described", "entities", "relations", "chunks"]
    assert [c.name for c in channels_for(Mode.GLOBAL, on)] == ["linked", "relations"]
    assert all("linked" not in [c.name for c in channels_for(mode, classic)] for mode in Mode)


async def test_linking_finds_the_entity_a_question_names_without_keywords(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, monkeypatch: pytest.MonkeyPatch) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        # no vector match counts (threshold 1), no keyword call: only a link can ground the question
        common = {"query": "Where is ACME Inc. headquartered?", "mode": "local", "keywords": "off",
                  "cosine_threshold": 1.0}
        calls: list[str] = []
        link = store_of(client).link_sync

        def counted(text: str) -> list[tuple[str, float]]:
            calls.append(text)
            return link(text)

        monkeypatch.setattr(store_of(client), "link_sync", counted)
        assert (await query(client, **common))["entities"] == []              # default: off
        assert (await query(client, **common, linking="off"))["entities"] == []
        assert calls == []                                                   # the index is not even read
        result = await query(client, **common, linking="on")
        assert calls == [common["query"]]
        assert result["entities"][0]["name"] == "Acme Corp" and result["entities"][0]["score"] == EXACT
        assert {(r["source"], r["target"]) for r in result["relations"]} >= {("Acme Corp", "Berlin")}
        assert "headquarters in Berlin" in result["context"]
        assert "keywords" not in facts.calls
        follow_up = await query(client, query="And where does she live?", mode="local", keywords="off",
                                cosine_threshold=1.0, linking="on",
                                history=[{"role": "user", "content": "Tell me about Carol White"},
                                         {"role": "assistant", "content": "She is a person."}])
        assert [(e["name"], e["score"]) for e in follow_up["entities"]] == [("Carol White", 0.5)]


async def test_with_linking_off_retrieval_is_unchanged(settings: Settings, fake: FakeOllama,
                                                       facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        for mode in ("local", "hybrid", "mix"):
            body = {"query": "Who works at Acme Corp in Berlin?", "mode": mode, "keywords": "off"}
            default, off = await query(client, **body), await query(client, **body, linking="off")
            for result in (default, off):
                result.pop("timings")
            assert default == off
            on = await query(client, **body, linking="on")
            assert on["entities"][0]["name"] in ("Acme Corp", "Berlin") and on["entities"][0]["score"] == EXACT


async def test_the_name_index_is_built_beside_the_turns_and_misses_no_commit(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big store's name index takes seconds to build: turns meanwhile are grounded without links,
    never held, and what is committed during the build is in the index once it is in use."""
    async with gateway_client(settings, fake) as client:
        await settle(client, (await upload(client, "team.txt", TEAM))["id"])
        store = store_of(client)
        release = threading.Event()
        build = NameIndex.build

        def slow_build(*args: Any) -> NameIndex:
            assert release.wait(30)
            return build(*args)

        monkeypatch.setattr(NameIndex, "build", staticmethod(slow_build))
        await store.rebuild()                      # the rows are reloaded: the index must be built again
        assert store.link_sync("Acme Corp") == []  # not ready: nothing linked, the turn not held
        assert not store.names.ready
        await settle(client, (await upload(client, "city.md", CITY))["id"])   # committed during the build
        release.set()
        with anyio.fail_after(30):
            while not store.names.ready:
                await anyio.sleep(0.01)
        assert [key for key, _ in store.link_sync("Acme Corp in Berlin")] == ["acme corp", "berlin"]
