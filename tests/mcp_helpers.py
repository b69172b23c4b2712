"""Talking to GraphGate's MCP server with the SDK's own client: over Streamable HTTP (a gateway's
/mcp, with or without its API key) or over stdio (``graphgate mcp`` as a subprocess)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextResourceContents

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"query", "get_entities", "get_relations", "insert", "batch_insert", "update", "delete", "stats",
         "rebuild_index"}


@contextlib.asynccontextmanager
async def http_session(url: str, api_key: str | None = None, *, mode: str = "auto") -> AsyncIterator[Client]:
    """A client session on ``url``/mcp; ``mode`` "legacy" forces the initialize handshake."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120), trust_env=False) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode) as client:
            yield client


def stdio_parameters(data_dir: Path, upstream: str, *, port: int, api_key: str | None = None) -> StdioServerParameters:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": "",
           "GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_UPSTREAM": upstream, "GRAPHGATE_PORT": str(port),
           "GRAPHGATE_KEYWORD_BUDGET": "30", "XDG_DATA_HOME": str(data_dir.parent / "xdg")}
    if api_key:
        env["GRAPHGATE_API_KEY"] = api_key
    return StdioServerParameters(command=sys.executable, args=["-m", "proxy", "mcp"], env=env, cwd=str(ROOT))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return " ".join(getattr(block, "text", "") for block in result.content)


def resource_json(contents: list[Any]) -> dict[str, Any]:
    assert len(contents) == 1 and isinstance(contents[0], TextResourceContents), contents
    return json.loads(contents[0].text)


def wait_processed(url: str, ids: list[str], headers: dict[str, str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    for document_id in ids:
        while True:
            status = httpx.get(f"{url}/rag/documents/{document_id}", headers=headers, timeout=30).json()["status"]
            if status == "processed":
                break
            assert status != "failed" and time.monotonic() < deadline, f"{document_id}: {status}"
            time.sleep(0.05)


async def settled(url: str, ids: list[str], headers: dict[str, str]) -> None:
    """``wait_processed`` for an async test (the gateway runs in another thread or process)."""
    with anyio.fail_after(30):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            for document_id in ids:
                while (status := (await http.get(f"/rag/documents/{document_id}")).json()["status"]) != "processed":
                    assert status != "failed", f"{document_id} failed"
                    await anyio.sleep(0.05)


def mcp_error(exc: BaseException) -> str:
    """The message of the MCPError inside what a client session raised (task groups wrap it)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), repr(exc)
    return str(exc)
