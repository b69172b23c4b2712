"""``POST /rag/query``: retrieval without a chat (keywords, entities, relations, chunks, references,
the context, token counts, timings), optionally with a generated answer (``knowledge.query``);
and the turn traces."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.state import access_settings, knowledge


async def query(request: Request) -> Response:
    kb = await knowledge(request)
    body = parse_object(await read_body(request, access_settings(request).max_body_bytes))
    outcome = await kb.query(body)
    return json_response(outcome.result)


async def traces(request: Request) -> Response:
    rows = await (await knowledge(request)).traces.recent(100, 0)
    return json_response({"traces": rows})


ROUTES = [
    Route("/rag/query", query, methods=["POST"]),
    Route("/rag/traces", traces, methods=["GET"]),
]
