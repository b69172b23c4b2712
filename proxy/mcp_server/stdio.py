"""``graphgate mcp``: the MCP server over stdio for desktop clients (Claude Desktop and the like).

When a gateway answers on the configured port of this machine, the command bridges to its /mcp
(only one process may hold the store, and the gateway's pipeline keeps ingesting). Otherwise it
opens the store itself, as the gateway's lifespan does, and serves the same tools over stdio, on
every knowledge base of the data directory (each opened on first use, as the gateway opens them).
stdout is the protocol's channel: logs go to stderr, and while serving, the SDK points file
descriptor 1 at stderr so that nothing else can write there.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import anyio
import httpx

from proxy.core.data_dir import DATABASE_FILE, has_store
from proxy.core.errors import GraphGateError
from proxy.core.hosts import local_url
from proxy.core.settings import Settings
from proxy.core.settings_sections import ClientSettings
from proxy.knowledge.bases import KnowledgeBases
from proxy.knowledge.service import run_knowledge
from proxy.mcp_server.bridge import bridge
from proxy.mcp_server.http import PATH
from proxy.mcp_server.tools import build_server
from proxy.upstream.pool import connect

log = logging.getLogger("graphgate.mcp")
PROBE_SECONDS = 1.0


class McpCommandError(GraphGateError):
    """A sentence for the user on stderr that ends the command (exit status 1)."""


def gateway_url(settings: ClientSettings) -> str:
    return local_url(settings.host, settings.port)


async def gateway_answers(url: str) -> bool:
    """Whether a GraphGate gateway answers at ``url`` (its public health read, 200 or 503 with its
    JSON: no key needed)."""
    try:
        async with httpx.AsyncClient(timeout=PROBE_SECONDS, trust_env=False) as client:
            response = await client.get(url + "/rag/health")
            return "status" in response.json()
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, TypeError):
        return False


async def serve_own_store(settings: Settings, create: bool) -> None:
    if not has_store(settings.data_dir) and not create:
        raise McpCommandError(f"no gateway answers at {gateway_url(settings)} and there is no knowledge store at "
                              f"{settings.data_dir} (no {DATABASE_FILE} there): start `graphgate serve`, give "
                              "GRAPHGATE_PORT / GRAPHGATE_DATA_DIR where they are, or add --create for a new store")
    upstream = connect(settings)
    try:
        async with contextlib.AsyncExitStack() as stack:
            with contextlib.redirect_stdout(sys.stderr):  # until the SDK takes stdout over: nothing may print there
                bases = KnowledgeBases(settings, upstream)   # the other bases: opened on first use
                await stack.enter_async_context(bases.run())
                knowledge = bases.default = await stack.enter_async_context(
                    run_knowledge(settings, upstream, limiter=bases.limiter, embed_limiter=bases.embed_limiter))
            log.info("no gateway at %s: serving the store at %s over stdio", gateway_url(settings), settings.data_dir)
            await build_server(lambda: knowledge, settings, lambda: bases).run_stdio_async()
    finally:
        await upstream.aclose()


async def serve_stdio(settings: Settings, create: bool = False) -> None:
    url = gateway_url(settings)
    if await gateway_answers(url):
        log.info("bridging stdio to the gateway at %s%s", url, PATH)
        await bridge(url + PATH, settings.api_key)
    else:
        await serve_own_store(settings, create)


def run(settings: Settings, create: bool = False) -> int:
    for chatty in ("httpx", "httpx2"):   # a line per request would bury the desktop client's log
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        anyio.run(serve_stdio, settings, create)
    except GraphGateError as exc:   # StoreUnavailable (another process holds the store), no store, ...
        log.error("graphgate mcp: %s", exc.message)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
