"""The MCP server at /mcp on a real uvicorn gateway (over the fake Ollama), driven by the SDK's own
Streamable HTTP client: the tools are listed with their schemas, each is called and answers what
the /rag API answers, errors come back as tool errors (unknown document, unknown entity, bad
arguments), rebuild_index reports progress, the resources read, and the API key guards it all."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from proxy.app import create_app
from proxy.core.settings import Settings
from tests.corpus import CITY, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.mcp_helpers import (
    TOOLS,
    error_text,
    http_session,
    mcp_error,
    resource_json,
    settled,
    structured,
    wait_processed,
)

pytestmark = pytest.mark.anyio

KEY = "mcp-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}


def gateway_settings(data_dir: Path, upstream: str, **extra: str) -> Settings:
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(data_dir),
                                  "GRAPHGATE_KEYWORD_BUDGET": "30", **extra})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One gateway with an API key and the two corpus documents processed (uploaded over /rag)."""
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    data_dir = tmp_path_factory.mktemp("mcp") / "data"
    with fake.serve() as upstream, serve_in_thread(create_app(gateway_settings(
            data_dir, upstream, GRAPHGATE_API_KEY=KEY))) as url:
        ids = {}
        for name, text in (("team.md", TEAM), ("city.md", CITY)):
            response = httpx.post(f"{url}/rag/documents", json={"name": name, "text": text}, headers=AUTH)
            ids[name] = response.json()["documents"][0]["id"]
        wait_processed(url, list(ids.values()), AUTH)
        yield {"url": url, "ids": ids}


async def test_the_tools_are_listed_with_input_and_output_schemas_and_descriptions(world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        tools = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.description and len(tool.description) > 60, tool.name
    by_name = {t.name: t for t in tools}
    query = by_name["query"]
    assert set(query.input_schema["properties"]) == {"question", "mode", "top_k", "filters", "max_total_tokens", "kb"}
    assert {name for name, tool in by_name.items() if "kb" in tool.input_schema["properties"]} == TOOLS
    assert query.input_schema["required"] == ["question"]
    assert query.output_schema is not None
    assert {"context", "entities", "relations", "chunks", "references"} <= set(query.output_schema["properties"])
    hints = {name: tool.annotations for name, tool in by_name.items()}
    assert hints["delete"] is not None and hints["delete"].destructive_hint is True
    assert hints["query"] is not None and hints["query"].read_only_hint is True
    assert {t.uri_template for t in templates} == {"graphgate://documents/{document_id}",
                                                   "graphgate://entities/{name}",
                                                   "graphgate://{kb}/documents/{document_id}",
                                                   "graphgate://{kb}/entities/{name}"}


async def test_query_answers_what_rag_query_answers(world: dict[str, Any]) -> None:
    body = {"query": "Who leads the Orion project?", "mode": "mix", "top_k": 10}
    async with httpx.AsyncClient(base_url=world["url"], headers=AUTH) as http:
        direct = (await http.post("/rag/query", json=body)).json()
    async with http_session(world["url"], KEY) as client:
        result = structured(await client.call_tool("query", {"question": body["query"], "mode": "mix",
                                                             "top_k": 10}))
    assert result["context"] == direct["context"] and "Alice Smith" in result["context"]
    assert [e["name"] for e in result["entities"]] == [e["name"] for e in direct["entities"]]
    assert [(r["source"], r["target"]) for r in result["relations"]] == [(r["source"], r["target"])
                                                                          for r in direct["relations"]]
    assert [c["id"] for c in result["chunks"]] == [c["id"] for c in direct["chunks"]]
    assert result["references"] == direct["references"] and result["references"][0]["id"] == 1
    assert result["mode"] == "mix" and result["skipped"] is None


async def test_query_refuses_bad_arguments_with_the_sdks_validation_and_the_services_messages(
        world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        missing = await client.call_tool("query", {})
        wrong_type = await client.call_tool("query", {"question": "x", "top_k": "many"})
        out_of_range = await client.call_tool("query", {"question": "x", "top_k": 0})
        bad_mode = await client.call_tool("query", {"question": "x", "mode": "deep"})
        empty = await client.call_tool("query", {"question": "  "})
    assert "question" in error_text(missing) and "Field required" in error_text(missing)
    assert "top_k" in error_text(wrong_type)
    assert "top_k" in error_text(out_of_range) and "greater than or equal to 1" in error_text(out_of_range)
    assert "mode" in error_text(bad_mode)
    assert "query is required" in error_text(empty)   # the knowledge service's own 400, as /rag/query says it


async def test_get_entities_by_name_by_similarity_and_by_type(world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        by_name = structured(await client.call_tool("get_entities", {"query": "acme"}))
        people = structured(await client.call_tool("get_entities", {"query": "e", "type": "Person", "limit": 50}))
        similar = structured(await client.call_tool("get_entities", {"query": "Berlin", "by": "similarity",
                                                                     "limit": 3}))
        too_many = await client.call_tool("get_entities", {"query": "a", "limit": 1000})
    assert [e["name"] for e in by_name["entities"]] == ["Acme Corp"]
    acme = by_name["entities"][0]
    assert acme["type"] == "Organization" and acme["degree"] >= 3 and "Acme Corp" in acme["description"]
    assert {e["name"] for e in people["entities"]} == {"Alice Smith", "Bob Jones", "Carol White"}
    assert len(similar["entities"]) == 3 and all(e["score"] is not None for e in similar["entities"])
    assert similar["entities"][0]["name"] == "Berlin"
    assert "limit" in error_text(too_many)


async def test_get_relations_one_and_two_hops_and_an_unknown_entity(world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        one = structured(await client.call_tool("get_relations", {"entity": "alice smith"}))
        two = structured(await client.call_tool("get_relations", {"entity": "Alice Smith", "depth": 2}))
        capped = structured(await client.call_tool("get_relations", {"entity": "Acme Corp", "depth": 3,
                                                                     "limit": 1}))
        unknown = await client.call_tool("get_relations", {"entity": "Nobody Atall"})
        too_deep = await client.call_tool("get_relations", {"entity": "Alice Smith", "depth": 4})
    assert one["entity"] == "Alice Smith"
    assert {frozenset((r["source"], r["target"])) for r in one["relations"]} == {frozenset(("Alice Smith", "Orion"))}
    assert all(r["direct"] and r["description"] for r in one["relations"])
    pairs = {frozenset((r["source"], r["target"])) for r in two["relations"]}
    assert frozenset(("Orion", "Acme Corp")) in pairs and len(pairs) > len(one["relations"])
    assert capped["capped"] and len(capped["relations"]) == 1
    assert "no entity named 'Nobody Atall'" in error_text(unknown)
    assert "depth" in error_text(too_deep)


async def test_insert_update_delete_and_their_errors(world: dict[str, Any]) -> None:
    url = world["url"]
    text = "Dave Brown repairs bicycles in Hamburg."
    async with http_session(url, KEY) as client:
        inserted = structured(await client.call_tool("insert", {"name": "dave.md", "text": text,
                                                                "metadata": {"source": "mcp"}}))
        assert inserted["outcome"] == "accepted" and inserted["status"] == "pending"
        again = structured(await client.call_tool("insert", {"name": "dave.md", "text": text}))
        assert again["outcome"] == "duplicate" and again["id"] == inserted["id"]
        await settled(url, [inserted["id"]], AUTH)
        document = resource_json((await client.read_resource(f"graphgate://documents/{inserted['id']}")).contents)
        assert document["text"] == text and document["name"] == "dave.md" and document["status"] == "processed"
        assert document["counts"]["chunks"] == 1 and document["metadata"] == {"source": "mcp"}
        retagged = structured(await client.call_tool("update", {"document_id": inserted["id"],
                                                                "metadata": {"source": "agent"}}))
        same_text = structured(await client.call_tool("update", {"document_id": inserted["id"], "text": text,
                                                                 "metadata": {"source": "agent", "v": 2}}))
        assert retagged["outcome"] == same_text["outcome"] == "updated"
        assert retagged["id"] == same_text["id"] == inserted["id"]
        document = resource_json((await client.read_resource(f"graphgate://documents/{inserted['id']}")).contents)
        assert document["metadata"] == {"source": "agent", "v": 2} and document["text"] == text

        updated = structured(await client.call_tool("update", {
            "document_id": inserted["id"],
            "content_base64": base64.b64encode(b"Dave Brown repairs bicycles in Bremen now.").decode()}))
        assert updated["outcome"] == "replaced" and updated["name"] == "dave.md" and updated["id"] != inserted["id"]
        await settled(url, [updated["id"]], AUTH)
        deleted = structured(await client.call_tool("delete", {"document_id": updated["id"]}))
        assert deleted["document"]["id"] == updated["id"] and deleted["chunks_removed"] == 1

        gone = await client.call_tool("delete", {"document_id": updated["id"]})
        no_update = await client.call_tool("update", {"document_id": "doc-nope", "text": "x"})
        both = await client.call_tool("insert", {"name": "x.md", "text": "a", "content_base64": "YQ=="})
        not_base64 = await client.call_tool("insert", {"name": "x.pdf", "content_base64": "%%%"})
        unsupported = await client.call_tool("insert", {"name": "x.exe", "text": "MZ"})
        bad_metadata = await client.call_tool("insert", {"name": "y.md", "text": "y", "metadata": {"$x": 1}})
        with pytest.raises(MCPError, match="doc-nope"):
            await client.read_resource("graphgate://documents/doc-nope")
    assert f"document {updated['id']} not found" in error_text(gone)
    assert "document doc-nope not found" in error_text(no_update)
    assert "either text or content_base64" in error_text(both)
    assert "not valid base64" in error_text(not_base64)
    assert "x.exe" in error_text(unsupported) or "unsupported" in error_text(unsupported).lower()
    assert "metadata" in error_text(bad_metadata)


async def test_batch_insert_reports_each_document(world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        batch = structured(await client.call_tool("batch_insert", {"documents": [
            {"name": "erin.md", "text": "Erin Gray teaches physics in Munich."},
            {"name": "broken.md"},
        ]}))
        all_bad = await client.call_tool("batch_insert", {"documents": [{"name": "a.md"}, {"name": "b.md"}]})
        empty = await client.call_tool("batch_insert", {"documents": []})
    first, second = batch["documents"]
    assert first["outcome"] == "accepted" and first["id"].startswith("doc-")
    assert second == {"name": "broken.md", "outcome": "rejected", "id": None, "status": None, "duplicate_of": None,
                      "error": "give the document as either text or content_base64 (one of them)"}
    assert "a.md: give the document" in error_text(all_bad) and "b.md:" in error_text(all_bad)
    assert "documents" in error_text(empty)
    await settled(world["url"], [first["id"]], AUTH)


async def test_stats_and_rebuild_index_with_progress_notifications(world: dict[str, Any]) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with http_session(world["url"], KEY) as client:
        stats = structured(await client.call_tool("stats", {}))
        rebuilt = structured(await client.call_tool("rebuild_index", {}, progress_callback=on_progress))
        after = structured(await client.call_tool("query", {"question": "Who works at Acme Corp?"}))
    async with http_session(world["url"], KEY, mode="legacy") as client:   # progress on a stateless 2025 call
        structured(await client.call_tool("rebuild_index", {}, progress_callback=on_progress))
    async with httpx.AsyncClient(base_url=world["url"], headers=AUTH) as http:
        rag = (await http.get("/rag/stats")).json()
    assert stats["entities"] == rag["entities"] and stats["chunks"] == rag["chunks"] > 0
    assert stats["documents"]["processed"] >= 2 and stats["index_sizes"] == rag["index_sizes"]
    assert rebuilt["index_sizes"]["chunks"] == rag["index_sizes"]["chunks"]
    assert [m for _, _, m in seen] == ["rebuilding indexes and graph: 0/1", "rebuilding indexes and graph: 1/1"] * 2
    assert [v for v, _, _ in seen] == [1, 2, 1, 2]
    assert "Bob Jones" in after["context"]


async def test_the_entity_resource(world: dict[str, Any]) -> None:
    async with http_session(world["url"], KEY) as client:
        entity = resource_json((await client.read_resource("graphgate://entities/acme%20corp")).contents)
        with pytest.raises(MCPError, match="Nobody"):
            await client.read_resource("graphgate://entities/Nobody")
    assert entity["name"] == "Acme Corp" and entity["type"] == "Organization" and entity["degree"] >= 3
    assert {"Orion", "Bob Jones", "Berlin"} <= {r["target"] if r["source"] == "Acme Corp" else r["source"]
                                               for r in entity["relations"]}


async def test_a_legacy_handshake_client_works_too(world: dict[str, Any]) -> None:
    """A client of the 2025 protocol (initialize, then calls): stateless, no session id."""
    async with http_session(world["url"], KEY, mode="legacy") as client:
        result = structured(await client.call_tool("get_entities", {"query": "Orion"}))
    assert [e["name"] for e in result["entities"]] == ["Orion"]


async def test_without_the_key_or_with_a_wrong_one_mcp_answers_401(world: dict[str, Any]) -> None:
    url = world["url"]
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=url, headers={"accept": "application/json, text/event-stream"}) as http:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
            response = await http.post("/mcp", json=ping, headers=headers)
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == "Bearer"
    for key in (None, "wrong"):
        with pytest.raises(BaseException) as refused:
            async with http_session(url, key) as client:
                await client.list_tools()
        assert "unauthorized: a valid API key is required" in mcp_error(refused.value)


async def test_a_console_password_never_opens_mcp(tmp_path: Path, fake: FakeOllama, facts: KnownFacts) -> None:
    with fake.serve() as upstream, serve_in_thread(create_app(gateway_settings(
            tmp_path / "data", upstream, GRAPHGATE_ADMIN_PASSWORD="console-password"))) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            response = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                       headers={"accept": "application/json, text/event-stream"})
        assert response.status_code == 401 and "GRAPHGATE_API_KEY" in response.json()["error"]["message"]
        with anyio.fail_after(10), pytest.raises(BaseException) as refused:
            async with http_session(url) as client:
                await client.list_tools()
        assert "/mcp needs GRAPHGATE_API_KEY" in mcp_error(refused.value)


async def test_an_open_gateway_serves_mcp_without_a_key(tmp_path: Path, fake: FakeOllama,
                                                        facts: KnownFacts) -> None:
    with fake.serve() as upstream, serve_in_thread(create_app(gateway_settings(tmp_path / "data", upstream))) as url:
        async with http_session(url) as client:
            stats = structured(await client.call_tool("stats", {}))
    assert stats["documents"] == {"pending": 0, "processing": 0, "processed": 0, "failed": 0}


async def test_what_stateless_serving_refuses_it_refuses_at_once_in_json_rpcs_shape(world: dict[str, Any]) -> None:
    """A GET would open an event stream nothing is ever sent on; a body that is no JSON is no message."""
    async with httpx.AsyncClient(base_url=world["url"], headers=AUTH, timeout=30) as http:
        get = await http.get("/mcp", headers={"accept": "text/event-stream"})
        delete = await http.delete("/mcp")
        text = await http.post("/mcp", content=b"hello", headers={"content-type": "text/plain"})
        broken = await http.post("/mcp", content=b"{", headers={"content-type": "application/json",
                                                                 "accept": "application/json, text/event-stream"})
    assert get.status_code == delete.status_code == 405 and get.headers["allow"] == "POST"
    assert text.status_code == 415 and broken.status_code == 400
    for response in (get, delete, text, broken):
        body = response.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["message"], body
    assert "mcp-session-id" not in broken.headers


async def test_query_filters_restrict_it_to_the_matching_documents_as_rag_query_does(world: dict[str, Any]) -> None:
    url = world["url"]
    question = "Who founded the Berlin chess club, and who works at Acme Corp?"
    async with http_session(url, KEY) as client:
        batch = structured(await client.call_tool("batch_insert", {"documents": [
            {"name": "club.md", "text": "Carol White founded the Berlin chess club.", "metadata": {"topic": "club"}},
            {"name": "staff.md", "text": "Bob Jones works at Acme Corp. Bob Jones plays chess.",
             "metadata": {"topic": ["work", "people"], "year": 2024}}]}))
        await settled(url, [d["id"] for d in batch["documents"]], AUTH)
        everything = structured(await client.call_tool("query", {"question": question}))
        club = structured(await client.call_tool("query", {"question": question, "filters": {"topic": "club"}}))
        recent = structured(await client.call_tool("query", {"question": question,
                                                             "filters": {"year": {"$gte": 2020}}}))
        nothing = structured(await client.call_tool("query", {"question": question, "filters": {"topic": "none"}}))
        bad = await client.call_tool("query", {"question": question, "filters": {"year": {"$near": 1}}})
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        direct = (await http.post("/rag/query", json={"query": question, "filters": {"topic": "club"}})).json()
    assert club["context"] == direct["context"] and club["filtered"] == direct["filtered"]
    assert {r["document"] for r in club["references"]} == {"club.md"}
    assert {r["document"] for r in recent["references"]} == {"staff.md"}
    assert len({r["document"] for r in everything["references"]}) > 1 and everything["filtered"] is None
    assert club["context"] != everything["context"] != recent["context"]
    assert nothing["context"] == "" and nothing["filtered"]["documents"] == 0
    assert "$near" in error_text(bad)


async def test_the_gateways_host_check_and_cors_stand_in_front_of_mcp(world: dict[str, Any]) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=world["url"], headers={**AUTH, **accept}) as http:
        rebound = await http.post("/mcp", json=message, headers={"host": "attacker.example"})
        foreign = await http.post("/mcp", json=message, headers={"origin": "https://attacker.example"})
        local = await http.post("/mcp", json=message, headers={"origin": "http://localhost:3000"})
    assert rebound.status_code == 403 and "attacker.example" in rebound.json()["error"]
    assert foreign.status_code == 403 and "not allowed" in foreign.json()["error"]
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:3000"


async def test_rebuild_index_says_why_it_cannot_re_embed_a_live_store(tmp_path: Path, fake: FakeOllama,
                                                                      facts: KnownFacts) -> None:
    """The store's vectors come from one embedding model and the gateway is configured with another:
    the tool's error names both (the service's Conflict, not the SDK's bare 'Error executing tool')."""
    data_dir = tmp_path / "data"
    with fake.serve() as upstream:
        with serve_in_thread(create_app(gateway_settings(data_dir, upstream))) as url:
            async with httpx.AsyncClient(base_url=url) as http:
                response = await http.post("/rag/documents", json={"name": "team.md", "text": TEAM})
            await settled(url, [response.json()["documents"][0]["id"]], {})
        with serve_in_thread(create_app(gateway_settings(data_dir, upstream,
                                                         GRAPHGATE_EMBED_MODEL="other-embedder"))) as url:
            async with http_session(url) as client:
                refused = await client.call_tool("rebuild_index", {})
    assert "other-embedder" in error_text(refused) and "nomic-embed-text" in error_text(refused)


async def test_the_tools_work_on_the_knowledge_base_named(tmp_path: Path, fake: FakeOllama,
                                                          facts: KnownFacts) -> None:
    with fake.serve() as upstream, serve_in_thread(create_app(gateway_settings(tmp_path / "data", upstream))) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.post("/rag/kbs", json={"name": "hr"})).status_code == 201
        async with http_session(url) as client:
            inserted = structured(await client.call_tool("insert", {"name": "team.md", "text": TEAM, "kb": "hr"}))
            async with httpx.AsyncClient(base_url=url) as http:
                with anyio.fail_after(30):
                    while (await http.get(f"/rag/documents/{inserted['id']}?kb=hr")).json()["status"] != "processed":
                        await anyio.sleep(0.05)
            in_hr = structured(await client.call_tool("stats", {"kb": "hr"}))
            in_default = structured(await client.call_tool("stats", {}))
            answer = structured(await client.call_tool("query", {"question": "Who works at Acme Corp?", "kb": "hr"}))
            people = structured(await client.call_tool("get_entities", {"query": "Acme", "kb": "hr"}))
            nowhere = await client.call_tool("stats", {"kb": "sales"})
            not_here = await client.call_tool("delete", {"document_id": inserted["id"]})   # it is in hr
            rebuilt = structured(await client.call_tool("rebuild_index", {"kb": "hr"}))
            rebuilt_default = structured(await client.call_tool("rebuild_index", {}))
            rebuilt_nowhere = await client.call_tool("rebuild_index", {"kb": "sales"})
            document = resource_json((await client.read_resource(f"graphgate://hr/documents/{inserted['id']}")
                                      ).contents)
            entity = resource_json((await client.read_resource("graphgate://hr/entities/Acme%20Corp")).contents)
            with pytest.raises(MCPError, match="not found"):   # the default base has no such document
                await client.read_resource(f"graphgate://documents/{inserted['id']}")
            with pytest.raises(MCPError, match="no knowledge base named 'sales'"):
                await client.read_resource(f"graphgate://sales/documents/{inserted['id']}")
    assert in_hr["documents"]["processed"] == 1 and in_default["documents"]["processed"] == 0
    assert [r["document"] for r in answer["references"]] == ["team.md"]
    assert [e["name"] for e in people["entities"]] == ["Acme Corp"]
    assert "no knowledge base named 'sales'" in error_text(nowhere)
    assert f"document {inserted['id']} not found" in error_text(not_here)
    assert rebuilt["index_sizes"]["chunks"] == in_hr["chunks"] >= 1
    assert rebuilt_default["index_sizes"]["chunks"] == 0
    assert "no knowledge base named 'sales'" in error_text(rebuilt_nowhere)
    assert document["name"] == "team.md" and document["status"] == "processed" and "Alice Smith" in document["text"]
    assert entity["name"] == "Acme Corp" and entity["relations"]
