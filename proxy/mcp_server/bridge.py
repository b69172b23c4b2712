"""``graphgate mcp`` in front of a running gateway: the desktop client's stdio, pumped both ways to
the gateway's /mcp over Streamable HTTP (the SDK's stdio server streams and its HTTP client
streams), the API key sent as a Bearer token. Nothing is parsed beyond what routing needs: the
SDK's client transport wants each message's protocol-version headers handed to it (a stdio
message has none), so they are read off the messages themselves.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

log = logging.getLogger("graphgate.mcp")

# the gateway may hold a call's stream open for as long as the call runs (an ingest, a rebuild)
TIMEOUT = httpx2.Timeout(30, read=None)


class Routing:
    """The HTTP headers each message needs: a 2026-07-28 message names its protocol version in its
    ``_meta`` (and needs Mcp-Method and Mcp-Name beside it); an older client negotiates once with
    ``initialize``, whose answer gives the version every later message carries."""

    def __init__(self) -> None:
        self.negotiated: str | None = None

    def headers(self, message: Any) -> dict[str, str] | None:
        if not isinstance(message, JSONRPCRequest | JSONRPCNotification):
            return {MCP_PROTOCOL_VERSION_HEADER: self.negotiated} if self.negotiated else None
        params = message.params or {}
        version = (params.get("_meta") or {}).get(PROTOCOL_VERSION_META_KEY)
        if not isinstance(version, str):
            if message.method == "initialize" or self.negotiated is None:
                return None
            return {MCP_PROTOCOL_VERSION_HEADER: self.negotiated}
        headers = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: message.method}
        name = params.get(NAME_BEARING_METHODS.get(message.method, ""))
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        return headers

    def answered(self, message: Any) -> None:
        """Notes the version an ``initialize`` answer settled on."""
        if isinstance(message, JSONRPCResponse) and isinstance(message.result, dict):
            version = message.result.get("protocolVersion")
            if isinstance(version, str) and "serverInfo" in message.result:
                self.negotiated = version


async def _to_gateway(stdio_read: Any, http_write: Any, routing: Routing) -> None:
    async with http_write:
        async for item in stdio_read:
            if isinstance(item, Exception):  # a line that is no JSON-RPC message: the client's bug
                log.warning("dropped a message from the client: %s", item)
                continue
            headers = routing.headers(item.message)
            await http_write.send(SessionMessage(item.message, metadata=ClientMessageMetadata(headers=headers)
                                                 if headers else None))


async def _to_client(http_read: Any, stdio_write: Any, routing: Routing) -> None:
    async with stdio_write:
        async for item in http_read:
            if isinstance(item, Exception):
                log.warning("the gateway's /mcp failed: %s", item)
                continue
            routing.answered(item.message)
            await stdio_write.send(SessionMessage(item.message))


async def bridge(url: str, api_key: str | None) -> None:
    """Pump stdio to ``url`` (the gateway's /mcp) and back until the client closes stdin."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    routing = Routing()
    async with (httpx2.AsyncClient(headers=headers, timeout=TIMEOUT, trust_env=False) as http,
                streamable_http_client(url, http_client=http) as (http_read, http_write),
                stdio_server() as (stdio_read, stdio_write),
                anyio.create_task_group() as group):
        group.start_soon(_to_client, http_read, stdio_write, routing)
        await _to_gateway(stdio_read, http_write, routing)
        group.cancel_scope.cancel()   # the client left: answers still on their way have no reader
