"""``graphgate mcp`` as a desktop client runs it: a subprocess spoken to over stdio by the SDK's own
client. With no gateway answering it opens the store itself (here a new one, ``--create``); with a
gateway on the configured port it bridges to the gateway's /mcp (the gateway holds the store:
what the tools do shows up in the gateway), sending the API key; a wrong key gets the gateway's 401."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client

from proxy.app import create_app
from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.mcp_helpers import TOOLS, error_text, mcp_error, resource_json, stdio_parameters, structured
from tests.servers import silent_port

pytestmark = pytest.mark.anyio

KEY = "stdio-test-key"


async def processed(client: Client, document_id: str) -> dict:
    with anyio.fail_after(30):
        while True:
            document = resource_json((await client.read_resource(f"graphgate://documents/{document_id}")).contents)
            if document["status"] in ("processed", "failed"):
                return document
            await anyio.sleep(0.05)


async def test_with_no_gateway_it_serves_its_own_store(tmp_path: Path, fake: FakeOllama, facts: KnownFacts) -> None:
    with fake.serve() as upstream:
        parameters = stdio_parameters(tmp_path / "data", upstream, port=silent_port())
        parameters.args.append("--create")
        with anyio.fail_after(60):
            async with Client(parameters) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                inserted = structured(await client.call_tool("insert", {"name": "team.md", "text": TEAM,
                                                                        "metadata": {"team": "orion"}}))
                assert inserted["outcome"] == "accepted"
                assert (await processed(client, inserted["id"]))["status"] == "processed"
                answer = structured(await client.call_tool("query", {"question": "Who leads Orion?"}))
                relations = structured(await client.call_tool("get_relations", {"entity": "Orion"}))
                stats = structured(await client.call_tool("stats", {}))
                unknown = await client.call_tool("delete", {"document_id": "doc-unknown"})
                bad = await client.call_tool("get_relations", {"entity": "Orion", "depth": "deep"})
                other_base = await client.call_tool("stats", {"kb": "hr"})
    assert "Alice Smith" in answer["context"] and answer["references"] == [{"id": 1, "document": "team.md"}]
    assert {r["source"] for r in relations["relations"]} | {r["target"] for r in relations["relations"]} >= {
        "Alice Smith", "Acme Corp"}
    assert stats["documents"]["processed"] == 1 and stats["entities"] > 0
    assert "document doc-unknown not found" in error_text(unknown)
    assert "depth" in error_text(bad)
    assert "no knowledge base named 'hr'" in error_text(other_base)   # none was made
    assert (tmp_path / "data").is_dir()


async def test_with_no_gateway_it_serves_the_other_bases_of_its_store_too(
        tmp_path: Path, fake: FakeOllama, facts: KnownFacts, settings: Settings) -> None:
    data = tmp_path / "data"
    async with gateway_client(settings.replace(data_dir=data), fake) as gateway:   # makes hr, then stops
        assert (await gateway.post("/rag/kbs", json={"name": "hr"})).status_code == 201
        uploaded = await gateway.post("/rag/documents", params={"kb": "hr"}, json={"name": "team.md", "text": TEAM})
        document_id = uploaded.json()["documents"][0]["id"]
        with anyio.fail_after(20):
            while (await gateway.get(f"/rag/documents/{document_id}", params={"kb": "hr"})).json()["status"] \
                    != "processed":
                await anyio.sleep(0.05)
    with fake.serve() as upstream:
        parameters = stdio_parameters(data, upstream, port=silent_port())
        with anyio.fail_after(60):
            async with Client(parameters) as client:
                in_hr = structured(await client.call_tool("stats", {"kb": "hr"}))
                in_default = structured(await client.call_tool("stats", {}))
                answer = structured(await client.call_tool("query", {"question": "Who works at Acme Corp?",
                                                                     "kb": "hr"}))
                document = resource_json((await client.read_resource(f"graphgate://hr/documents/{document_id}")
                                          ).contents)
                nowhere = await client.call_tool("stats", {"kb": "sales"})
    assert in_hr["documents"]["processed"] == 1 and in_default["documents"].get("processed", 0) == 0
    assert [r["document"] for r in answer["references"]] == ["team.md"]
    assert document["status"] == "processed"
    assert "no knowledge base named 'sales'" in error_text(nowhere)


async def test_without_a_gateway_or_a_store_it_says_so_and_stops(tmp_path: Path) -> None:
    parameters = stdio_parameters(tmp_path / "data", "http://127.0.0.1:9", port=silent_port())
    with anyio.fail_after(30):
        done = await anyio.run_process([parameters.command, *parameters.args], env=parameters.env,
                                       cwd=parameters.cwd, check=False)
    assert done.returncode == 1 and done.stdout == b""
    assert b"no knowledge store at" in done.stderr and b"--create" in done.stderr
    assert not (tmp_path / "data" / "graphgate.duckdb").exists()


def _gateway_settings(data_dir: Path, upstream: str) -> Settings:
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_DATA_DIR": str(data_dir),
                                  "GRAPHGATE_KEYWORD_BUDGET": "30", "GRAPHGATE_API_KEY": KEY})


async def test_with_a_gateway_it_bridges_to_its_mcp_with_the_key(tmp_path: Path, fake: FakeOllama,
                                                                   facts: KnownFacts) -> None:
    data_dir = tmp_path / "data"
    with fake.serve() as upstream, serve_in_thread(create_app(_gateway_settings(data_dir, upstream))) as url:
        port = int(url.rsplit(":", 1)[1])
        # the same data directory: had it opened the store rather than bridged, the gateway's lock would stop it
        parameters = stdio_parameters(data_dir, upstream, port=port, api_key=KEY)
        # a 2026 client, and one that starts with initialize
        for mode, text in (("auto", CITY), ("legacy", TEAM)):
            with anyio.fail_after(60):
                async with Client(parameters, mode=mode) as client:
                    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                    inserted = structured(await client.call_tool("insert", {"name": f"{mode}.md", "text": text}))
                    document = await processed(client, inserted["id"])
                    entity = resource_json((await client.read_resource("graphgate://entities/Acme%20Corp")).contents)
                    unknown = await client.call_tool("get_relations", {"entity": "Atlantis"})
            assert document["status"] == "processed" and entity["name"] == "Acme Corp"
            assert "no entity named 'Atlantis'" in error_text(unknown)
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {KEY}"}) as http:
            names = {d["name"] for d in (await http.get("/rag/documents")).json()["documents"]}
        assert names == {"auto.md", "legacy.md"}   # the gateway's store got them

        wrong = stdio_parameters(data_dir, upstream, port=port, api_key="wrong")
        with anyio.fail_after(30), pytest.raises(BaseException) as refused:
            async with Client(wrong) as client:
                await client.list_tools()
        assert "unauthorized: a valid API key is required" in mcp_error(refused.value)


def test_the_command_is_listed() -> None:
    import subprocess

    shown = subprocess.run([sys.executable, "-m", "proxy", "--help"], capture_output=True, text=True, check=True)
    assert "mcp" in shown.stdout


async def test_a_store_another_process_holds_is_refused_with_the_reason(tmp_path: Path, fake: FakeOllama,
                                                                        facts: KnownFacts) -> None:
    """A gateway on another port than the configured one holds the store: no bridge, no second opener."""
    data_dir = tmp_path / "data"
    with fake.serve() as upstream, serve_in_thread(create_app(_gateway_settings(data_dir, upstream))):
        parameters = stdio_parameters(data_dir, upstream, port=silent_port())
        with anyio.fail_after(60):
            done = await anyio.run_process([parameters.command, *parameters.args], env=parameters.env,
                                           cwd=parameters.cwd, check=False)
    assert done.returncode == 1 and done.stdout == b"", done.stderr[-2000:]
    assert b"graphgate mcp:" in done.stderr and b"lock" in done.stderr.lower(), done.stderr[-2000:]
