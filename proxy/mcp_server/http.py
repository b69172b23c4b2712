"""``/mcp`` on the gateway: the MCP server over Streamable HTTP, behind the gateway's guards.

The gateway's Host check and CORS run in front of it as for every route (the SDK's own DNS
rebinding check is off: the gateway's allow-list, GRAPHGATE_ALLOWED_HOSTS, is the one). Then the
API keys: with GRAPHGATE_API_KEY set or any key stored (proxy/control/keys.py), a request needs
``Authorization: Bearer <key>`` and is refused with 401 before the SDK reads it; its principal goes
in the request's scope, where each tool checks it (tools.py). A console login never grants access
(an agent holds no cookie, and a cookie is ambient: a page could ride it); with a console password
but no API key, /mcp is closed, since its tools read and change what the password guards.

Stateless: each POST is served on its own (no ``Mcp-Session-Id``). The tools need no
server-to-client requests (no sampling or elicitation) and progress notifications still stream on
the call's own response, so sessions would buy nothing but state: memory per client, idle
reaping, and "session not found" after a restart for a desktop client that stays open. Clients of
the 2026-07-28 protocol are stateless whatever this says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.core.errors import ServiceUnavailable
from proxy.core.settings_sections import AccessSettings
from proxy.guards.middleware import UNAUTHORIZED, KeyCheck, mark
from proxy.knowledge.service import Knowledge
from proxy.mcp_server.tools import build_server
from proxy.state import Gateway

PATH = "/mcp"


def refusal(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON-RPC error body (no request id) at ``status``: the SDK's clients show its message
    rather than a bare status."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
    return Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status,
                    media_type="application/json", headers=headers)


def gateway_knowledge(gateway: Gateway) -> Knowledge:
    """The gateway's knowledge service, or 503 with the reason the store is unavailable."""
    if gateway.knowledge is None:
        raise ServiceUnavailable(f"the knowledge store is unavailable: {gateway.knowledge_error}")
    return gateway.knowledge


class McpEndpoint:
    """The ASGI app at ``/mcp``: the key check, then the SDK's session manager (run by ``serving``)."""

    def __init__(self, settings: AccessSettings) -> None:
        self.settings = settings
        self.check = KeyCheck(settings.api_key)
        self.server: MCPServer | None = None   # while serving

    def route(self) -> Route:
        return Route(PATH, endpoint=self)

    @asynccontextmanager
    async def serving(self, gateway: Gateway) -> AsyncIterator[None]:
        """Serve /mcp for the lifespan of the gateway (its task group ends the calls in flight)."""
        server = build_server(lambda: gateway_knowledge(gateway), gateway.settings, lambda: gateway.bases)
        # makes the server's session manager (the Starlette app it returns is not used: /mcp is our route)
        server.streamable_http_app(streamable_http_path=PATH, stateless_http=True,
                                   max_request_body_size=self.settings.max_body_bytes,
                                   transport_security=TransportSecuritySettings(
                                       enable_dns_rebinding_protection=False))
        try:
            async with server.session_manager.run():
                self.server = server
                try:
                    yield
                finally:
                    self.server = None
        except BaseExceptionGroup as group:
            # the SDK's task group wraps whatever ends the gateway's lifespan (a CLI command's error
            # in an in-process gateway, say): let it out as it was raised
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def refused(self, scope: Scope) -> str | None:
        """Why the request may not reach the MCP server, or None (its key's principal is then in its scope)."""
        if self.check.in_use(scope):
            who = self.check.principal(scope)
            if who is None:
                return UNAUTHORIZED
            mark(scope, who)
            return None
        if self.settings.admin_password:
            return ("unauthorized: /mcp needs GRAPHGATE_API_KEY when a console password is set (the console's "
                    "login does not open it); set the key and send it as Authorization: Bearer <key>")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        why = self.refused(scope)
        if why is not None:
            return await refusal(401, why, {"www-authenticate": "Bearer"})(scope, receive, send)
        if self.server is None:
            return await refusal(503, "the MCP server is not running (the gateway is starting or "
                                      "stopping)")(scope, receive, send)
        unfit = self.unfit(scope)
        if unfit is not None:
            return await unfit(scope, receive, send)
        await self.server.session_manager.handle_request(scope, receive, send)

    @staticmethod
    def unfit(scope: Scope) -> Response | None:
        """What stateless serving refuses before the SDK sees it, in JSON-RPC's error shape: any
        method but POST (a GET would open an event stream nothing is ever sent on, and hang there),
        and a body that is not JSON."""
        if scope["method"] != "POST":
            return refusal(405, "Method Not Allowed: this server is stateless, send each message as a POST",
                           {"allow": "POST"})
        if not Headers(scope=scope).get("content-type", "").lower().startswith("application/json"):
            return refusal(415, "Unsupported Media Type: send the message as application/json")
        return None
