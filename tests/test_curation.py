"""Curating the graph by hand: merges, renames, edits and deletions commit to all three stores at once
and survive re-ingestion of the same documents. Real engines, the scripted model of tests/extractor.py."""

from __future__ import annotations

import anyio.to_thread
import httpx
import pytest

from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.core.settings import Settings
from proxy.merging.suggestions import normalised
from proxy.store.changes import pair_key
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.invariants import check_store, in_memory
from tests.rag_helpers import settle, upload
from tests.store_backends import backend_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, store_setting: str) -> Settings:
    """Every test here that runs the gateway runs it on both backends (tests/store_backends.py)."""
    return settings.replace(store=store_setting)


def kb(client: httpx.AsyncClient):
    return client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]


def entities(client: httpx.AsyncClient) -> dict[str, tuple]:
    return {r[0]: r[1:] for r in kb(client).store.tables.db.read_sync(
        lambda c: c.execute("SELECT name, type, description, source_ids FROM entities").fetchall())}


def relations(client: httpx.AsyncClient) -> dict[frozenset[str], tuple]:
    rows = kb(client).store.tables.db.read_sync(lambda c: c.execute(
        "SELECT s.name, t.name, r.weight, r.keywords, r.description FROM relations r "
        "JOIN entities s ON s.name_key = r.source JOIN entities t ON t.name_key = r.target").fetchall())
    return {frozenset((a, b)): (w, list(k), d) for a, b, w, k, d in rows}


async def ingest(client: httpx.AsyncClient, *docs: tuple[str, str]) -> list[str]:
    ids = [(await upload(client, name, text))["id"] for name, text in docs]
    for document_id in ids:
        assert (await settle(client, document_id))["status"] == "processed"
    return ids


async def reingest_team(client: httpx.AsyncClient, team_id: str) -> None:
    """Delete the document and upload it again: its extractions are cached, its graph is rebuilt."""
    assert (await client.delete(f"/rag/documents/{team_id}")).status_code == 200
    await ingest(client, ("team.txt", TEAM))


async def test_merge_repoints_relations_drops_self_loops_and_survives_reingestion(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        team_id, _ = await ingest(client, ("team.txt", TEAM), ("city.md", CITY))
        curator = kb(client).graph.curator
        before = kb(client).store.stats_sync()

        plan = await curator.plan_merge(["orion", "acme corp"], "Acme Corp")
        assert plan.merged == ["orion"] and plan.self_loops == ["acme corp\x1forion"]
        assert {(r["source"], r["target"]) for r in plan.relations} == {
            ("Acme Corp", "Alice Smith"), ("Acme Corp", "Bob Jones"), ("Acme Corp", "Berlin")}
        assert "Alice Smith leads the Orion project." in plan.description
        assert kb(client).store.stats_sync()["entities"] == before["entities"]  # a preview writes nothing

        result = await curator.merge(["orion", "acme corp"], "Acme Corp")
        assert result["self_loops_dropped"] == 1
        names = entities(client)
        assert "Orion" not in names and names["Acme Corp"][0] == "Organization"
        assert frozenset(("Alice Smith", "Acme Corp")) in relations(client)
        assert len(names["Acme Corp"][2]) == 2  # the team chunk and the city chunk

        await reingest_team(client, team_id)
        assert "Orion" not in entities(client)  # the merged-away name resolves to the target
        assert frozenset(("Alice Smith", "Acme Corp")) in relations(client)
        assert not [k for k in relations(client) if "Orion" in k]
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))


async def test_rename_is_a_merge_into_a_new_name_and_onto_an_existing_one_is_refused(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        team_id, _ = await ingest(client, ("team.txt", TEAM), ("city.md", CITY))
        curator = kb(client).graph.curator
        with pytest.raises(Conflict, match="merge into it"):
            await curator.edit_entity("orion", name="acme corp")
        await curator.edit_entity("orion", name="Project Orion", description="A secret project.")
        names = entities(client)
        assert "Orion" not in names and names["Project Orion"][1] == "A secret project."
        assert frozenset(("Alice Smith", "Project Orion")) in relations(client)

        await reingest_team(client, team_id)
        names = entities(client)
        assert "Orion" not in names and names["Project Orion"][1] == "A secret project."
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))


async def test_hand_edits_survive_reingestion_and_bad_edits_change_nothing(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        team_id, _ = await ingest(client, ("team.txt", TEAM), ("city.md", CITY))
        curator = kb(client).graph.curator
        await curator.edit_entity("bob jones", type="Engineer", description="Builds rockets.")
        pair = "alice smith\x1forion"
        await curator.edit_relation(pair, keywords="leads, owns", weight="7.5")
        snapshot = (entities(client), relations(client))
        for bad in ({"weight": "-1"}, {"weight": "lots"}, {"keywords": 5}):
            with pytest.raises(BadRequest):
                await curator.edit_relation(pair, **bad)
        with pytest.raises(BadRequest):
            await curator.edit_entity("bob jones", name="   ")
        with pytest.raises(NotFound):
            await curator.edit_entity("nobody", type="Person")
        assert (entities(client), relations(client)) == snapshot

        await reingest_team(client, team_id)
        bob = entities(client)["Bob Jones"]
        assert bob[:2] == ("Engineer", "Builds rockets.")
        weight, keywords, _ = relations(client)[frozenset(("Alice Smith", "Orion"))]
        assert (weight, keywords) == (7.5, ["leads", "owns"])
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))


async def test_deleting_an_entity_or_relation_removes_it_from_every_store(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client, ("team.txt", TEAM), ("city.md", CITY))
        curator = kb(client).graph.curator
        assert (await curator.delete_entity("berlin"))["relations_removed"] == 2
        await curator.delete_relation(pair_key("bob jones", "acme corp"))
        store = kb(client).store
        rows, graph = in_memory(store)
        assert not graph.has("berlin") and rows.entity("berlin") is None
        assert frozenset(("Bob Jones", "Acme Corp")) not in relations(client)
        with pytest.raises(NotFound):
            await curator.delete_entity("berlin")
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))


async def test_suggestions_find_namesakes_and_dismissals_stick(settings: Settings, fake: FakeOllama) -> None:
    """With entity resolution off (or on a store built before it), namesakes are suggested instead."""
    fake.structured = KnownFacts({"Acme Corp": "Organization", "ACME Corporation": "Organization",
                                  "Berlin": "Location"})
    async with gateway_client(settings.replace(entity_resolution=False), fake) as client:
        await ingest(client, ("a.txt", "Acme Corp sells anvils in Berlin. ACME Corporation was founded in 1920."))
        finder = kb(client).graph.finder
        found = finder.find(0.9)
        assert [(s.a, s.b, s.reason) for s in found][:1] == [("acme corp", "acme corporation", "same name")]
        await kb(client).graph.dismiss_suggestion("acme corporation", "acme corp")
        assert not [s for s in finder.find(0.9) if s.reason == "same name"]


def test_names_compare_without_case_punctuation_or_legal_suffixes() -> None:
    assert normalised("ACME Corp.") == normalised("acme corporation") == normalised("The Acme, Inc") == "acme"
    assert normalised("Café Müller") == normalised("cafe muller")
    assert normalised("Alice") != normalised("Alicia")



async def test_the_json_api_edits_merges_and_deletes(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client, ("team.txt", TEAM), ("city.md", CITY))
        orion = (await client.get("/rag/entities/ORION")).json()
        assert orion["name"] == "Orion" and orion["degree"] == 2
        edited = await client.patch("/rag/entities/orion", json={"type": "Project"})
        assert edited.status_code == 200 and edited.json()["type"] == "Project"
        assert (await client.patch("/rag/entities/orion", json={"colour": "red"})).status_code == 400
        assert (await client.patch("/rag/entities/orion", json={"name": "Acme Corp"})).status_code == 409
        preview = await client.post("/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp", "dry_run": True})
        assert preview.json()["self_loops_dropped"] == 1 and preview.json()["merged"] == ["Orion"]
        assert (await client.get("/rag/entities/orion")).status_code == 200  # a dry run changes nothing
        merged = await client.post("/rag/merge", json={"entities": ["Orion"], "target": "Acme Corp"})
        assert merged.status_code == 200
        alias = await client.get("/rag/entities/orion")  # a merged-away name resolves to its target
        assert alias.status_code == 200 and alias.json()["name"] == "Acme Corp"
        assert alias.json()["resolved_from"] == "orion"
        relation = {"source": "Alice Smith", "target": "Acme Corp"}
        assert (await client.patch("/rag/relations", json={**relation, "weight": 3})).status_code == 200
        assert (await client.patch("/rag/relations", json={**relation, "weight": "x"})).status_code == 400
        assert (await client.request("DELETE", "/rag/relations", json=relation)).status_code == 200
        assert (await client.request("DELETE", "/rag/relations", json=relation)).status_code == 404
        assert (await client.delete("/rag/entities/berlin")).json()["relations_removed"] == 2
        assert (await client.post("/rag/merge", json={"entities": "x", "target": "y"})).status_code == 400
    await anyio.to_thread.run_sync(check_store, settings.data_dir, backend_of(settings.store))
