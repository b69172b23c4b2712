"""Document metadata (set at upload, edited, listed by filter) and metadata filters on retrieval:
/rag/query's ``filters``, a chat's X-GraphGate-Filter header and its prefix. The same question
with and without a filter gets different, correct contexts; a filter that matches nothing gives
an empty context, never an error; bad metadata or a bad filter is a 400 that changes nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.core.metadata import check_metadata, parse_filter
from proxy.core.settings import Settings
from tests.chat_helpers import body, chats, traces
from tests.corpus import CITY, TEAM
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, store_snapshot_of
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("facts")]


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)

TEAM_META = {"category": "projects", "year": 2024, "tags": ["orion", "staff"]}
CITY_META = {"category": "places", "year": 2023, "source": "atlas"}
QUESTION = "Where is Acme Corp headquartered, and who works there?"


async def put(client: httpx.AsyncClient, name: str, text: str, metadata: Any = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"name": name, "text": text}
    if metadata is not None:
        payload["metadata"] = metadata
    response = await client.post("/rag/documents", json=payload)
    assert response.status_code in (200, 202), response.text
    return response.json()["documents"][0]


async def two_documents(client: httpx.AsyncClient) -> tuple[str, str]:
    team = await settle(client, (await put(client, "team.txt", TEAM, TEAM_META))["id"])
    city = await settle(client, (await put(client, "city.md", CITY, CITY_META))["id"])
    assert team["status"] == city["status"] == "processed"
    return team["id"], city["id"]


def documents_cited(result: dict[str, Any]) -> set[str]:
    return {d for chunk in result["chunks"] for d in chunk["documents"]}


@on_both_backends
async def test_metadata_is_stored_shown_and_edited(client: httpx.AsyncClient) -> None:
    team_id, city_id = await two_documents(client)
    assert (await client.get(f"/rag/documents/{team_id}")).json()["metadata"] == TEAM_META

    changed = await client.patch(f"/rag/documents/{city_id}", json={"metadata": {"category": "projects"}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["metadata"] == {"category": "projects"}
    assert (await client.get(f"/rag/documents/{city_id}")).json()["metadata"] == {"category": "projects"}

    listed = await client.get("/rag/documents", params={"filter": json.dumps({"year": {"$gte": 2024}})})
    assert [d["id"] for d in listed.json()["documents"]] == [team_id]
    assert listed.json()["total"] == 1
    both = await client.get("/rag/documents", params={"filter": '{"category": "projects"}'})
    assert {d["id"] for d in both.json()["documents"]} == {team_id, city_id}


async def test_multipart_upload_takes_a_metadata_field(client: httpx.AsyncClient) -> None:
    response = await client.post("/rag/documents", files={"file": ("notes.txt", b"Bob Jones works at Acme Corp.")},
                                 data={"metadata": '{"source": "wiki", "rank": 3}'})
    assert response.status_code == 202, response.text
    document = (await client.get(f"/rag/documents/{response.json()['documents'][0]['id']}")).json()
    assert document["metadata"] == {"source": "wiki", "rank": 3}


@on_both_backends
async def test_a_new_version_keeps_its_metadata_unless_given(client: httpx.AsyncClient) -> None:
    first = await settle(client, (await put(client, "team.txt", TEAM, TEAM_META))["id"])
    second = await put(client, "team.txt", TEAM + " Carol White visits Acme Corp.")
    assert second["outcome"] == "replaced"
    assert (await settle(client, second["id"]))["metadata"] == TEAM_META
    third = await put(client, "team.txt", TEAM + " Alice Smith visits Berlin.", {"category": "archive"})
    assert (await settle(client, third["id"]))["metadata"] == {"category": "archive"}
    assert first["id"] != second["id"] != third["id"]


@pytest.mark.parametrize("metadata", [
    [1, 2], {"": "x"}, {"$op": 1}, {"ok": None}, {"ok": True}, {"ok": {"nested": 1}}, {"ok": [1, [2]]},
    {"k" * 65: 1}, {f"k{i}": i for i in range(33)}, "{not json",
])
@on_both_backends
async def test_bad_metadata_is_refused_and_stores_nothing(client: httpx.AsyncClient, metadata: Any) -> None:
    kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
    before = await store_snapshot_of(kb)
    response = await client.post("/rag/documents", json={"name": "x.txt", "text": "Alice Smith.",
                                                         "metadata": metadata})
    assert response.status_code == 400, response.text
    assert "metadata" in response.json()["error"]
    assert await store_snapshot_of(kb) == before


async def test_bad_metadata_edits_are_refused(client: httpx.AsyncClient) -> None:
    team_id, _ = await two_documents(client)
    payloads: tuple[dict[str, Any], ...] = (
        {"metadata": {"a": {"b": 1}}}, {"name": "renamed"}, {"metadata": [1]}, {"metadata": []}, {"metadata": 0},
        {"metadata": False}, {"metadata": ""}, {"metadata": '{"a": 1}'})
    for payload in payloads:
        response = await client.patch(f"/rag/documents/{team_id}", json=payload)
        assert response.status_code == 400, (payload, response.text)
    assert (await client.get(f"/rag/documents/{team_id}")).json()["metadata"] == TEAM_META
    missing = await client.patch("/rag/documents/doc-nope", json={"metadata": {}})
    assert missing.status_code == 404 and "doc-nope" in missing.json()["error"]


@on_both_backends
async def test_a_filter_restricts_what_a_query_finds(client: httpx.AsyncClient) -> None:
    await two_documents(client)
    everything = await query(client, query=QUESTION)
    assert documents_cited(everything) == {"team.txt", "city.md"}
    assert "filtered" not in everything

    projects = await query(client, query=QUESTION, filters={"category": "projects"})
    assert documents_cited(projects) == {"team.txt"}
    assert projects["filtered"] == {"filters": '{"category": "projects"}', "documents": 1}
    names = {e["name"] for e in projects["entities"]}
    assert "Berlin" not in names and "Carol White" not in names   # only the city document sources them
    assert {"Berlin", "Carol White"} <= {e["name"] for e in everything["entities"]}
    assert not any("Berlin" in (r["source"], r["target"]) for r in projects["relations"])
    assert "Carol White" not in projects["context"] and "Carol White" in everything["context"]
    # Acme Corp is sourced by both documents: described by what the team document says of it alone
    assert "headquarters" in everything["context"] and "headquarters" not in projects["context"]

    places = await query(client, query=QUESTION, filters={"source": "atlas", "year": {"$lt": 2024}})
    assert documents_cited(places) == {"city.md"}
    assert "Orion" not in places["context"] and "Bob Jones" not in places["context"]
    assert "Berlin" in places["context"]

    by_name = await query(client, query=QUESTION, filters={"$document": ["city.md"]})
    assert documents_cited(by_name) == {"city.md"}


async def test_a_filter_that_matches_nothing_gives_an_empty_context(client: httpx.AsyncClient) -> None:
    await two_documents(client)
    for filters in ({"category": "none"}, {"tags": {"$exists": True}, "source": "atlas"}):
        result = await query(client, query=QUESTION, filters=filters)
        assert result["context"] == "" and result["chunks"] == [] and result["entities"] == []
        assert result["skipped"] == "no searchable document matches the filter"


@pytest.mark.parametrize("filters", [
    [1], "{", {"$bad": 1}, {"year": {"$near": 1}}, {"year": {}}, {"year": {"$in": "x"}},
    {"year": {"$exists": 1}}, {"year": {"$gt": [1]}},
    {"year": {"$in": list(range(101))}}, {"year": list(range(101))}, {"year": []}, {"k": "x" * 9000},
])
async def test_bad_filters_are_a_400(client: httpx.AsyncClient, filters: Any) -> None:
    await two_documents(client)
    response = await client.post("/rag/query", json={"query": QUESTION, "filters": filters})
    assert response.status_code == 400, response.text
    assert "filter" in response.json()["error"]


@on_both_backends
async def test_editing_metadata_changes_what_a_filter_finds(client: httpx.AsyncClient) -> None:
    _, city_id = await two_documents(client)
    assert documents_cited(await query(client, query=QUESTION, filters={"category": "projects"})) == {"team.txt"}
    await client.patch(f"/rag/documents/{city_id}", json={"metadata": {"category": "projects"}})
    after = await query(client, query=QUESTION, filters={"category": "projects"})
    assert documents_cited(after) == {"team.txt", "city.md"}


async def test_a_chat_filter_by_header_and_by_prefix(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    await two_documents(client)
    plain = await client.post("/api/chat", json=body(QUESTION))
    header = await client.post("/api/chat", json=body(QUESTION),
                               headers={"X-GraphGate-Filter": '{"category": "places"}'})
    prefix = await client.post("/api/chat", json=body('/{"category": "projects"} ' + QUESTION))
    assert plain.status_code == header.status_code == prefix.status_code == 200
    sent = [json.dumps(r.json["messages"]) for r in chats(fake)]
    assert len(sent) == 3
    assert "Orion" in sent[0] and "Carol White" in sent[0]
    assert "Carol White" in sent[1] and "Orion" not in sent[1]
    assert "Orion" in sent[2] and "Carol White" not in sent[2] and "headquarters" not in sent[2]
    assert '{\\"category\\"' not in sent[2]   # the prefix is stripped before the turn goes upstream
    recent = await traces(client)
    filtered = [t["detail"].get("filtered") for t in recent if t["api"] == "ollama"]
    assert {"filters": '{"category": "places"}', "documents": 1} in filtered
    assert {"filters": '{"category": "projects"}', "documents": 1} in filtered


async def test_a_bad_chat_filter_header_is_a_400(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    await two_documents(client)
    response = await client.post("/api/chat", json=body(QUESTION), headers={"X-GraphGate-Filter": "[1]"})
    assert response.status_code == 400
    assert "X-GraphGate-Filter" in response.json()["error"]
    assert chats(fake) == []


def test_filter_semantics() -> None:
    team = check_metadata(TEAM_META)
    cases = [
        ({"category": "projects"}, True), ({"category": ["places", "projects"]}, True),
        ({"tags": "orion"}, True), ({"tags": {"$nin": ["orion"]}}, False), ({"tags": {"$ne": "x"}}, True),
        ({"year": {"$gte": 2024, "$lt": 2025}}, True), ({"year": {"$gt": 2024}}, False),
        ({"year": {"$gt": "2000"}}, False),   # a number and a string never compare
        ({"missing": {"$exists": False}}, True), ({"missing": {"$ne": 1}}, True), ({"missing": 1}, False),
        ({"$document": "team.txt", "year": 2024}, True), ({"$document": {"$in": ["a", "b"]}}, False),
    ]
    for spec, expected in cases:
        parsed = parse_filter(spec)
        assert parsed is not None
        assert parsed.matches("team.txt", team) is expected, spec
    assert parse_filter({}) is None and parse_filter(None) is None


async def test_null_metadata_clears_it(client: httpx.AsyncClient) -> None:
    team_id, _ = await two_documents(client)
    cleared = await client.patch(f"/rag/documents/{team_id}", json={"metadata": None})
    assert cleared.status_code == 200 and cleared.json()["metadata"] == {}
