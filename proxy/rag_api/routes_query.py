"""``POST /rag/query``: retrieval without a chat (keywords, entities, relations, chunks, references,
the context, token counts, timings), optionally with a generated answer; and the turn traces."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.gateway.augment import inject
from proxy.core.errors import BadRequest
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.retrieval.budget import Budget, conversation_tokens, plan_budget
from proxy.retrieval.params import QueryParams
from proxy.retrieval.retriever import Retrieval
from proxy.rag_api.routes_documents import knowledge
from proxy.knowledge.traces import Trace, recent_traces


def _history(body: dict[str, Any]) -> list[dict[str, Any]]:
    history = body.get("history") or []
    if not isinstance(history, list) or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant", "system") and isinstance(m.get("content"), str)
            for m in history):
        raise BadRequest('history must be a list of {"role": "user" | "assistant", "content": "..."} messages')
    return history


def _budget(request: Request, body: dict[str, Any], messages: list[dict[str, Any]], params: QueryParams) -> Budget:
    settings = request.app.state.gateway.settings
    num_ctx = body.get("num_ctx")
    if num_ctx is None:  # no window to simulate: the configured ceilings apply
        return Budget(0, "none", 0, 0, params.max_total_tokens, params.max_total_tokens,
                      params.max_entity_tokens, params.max_relation_tokens)
    if isinstance(num_ctx, bool) or not isinstance(num_ctx, int) or num_ctx < 1:
        raise BadRequest("num_ctx must be a positive whole number")
    count = knowledge(request).tokenizer.count
    return plan_budget(window=num_ctx, source="request", conversation=conversation_tokens(messages, count),
                       reserve=settings.answer_reserve, max_total=params.max_total_tokens,
                       max_entity=params.max_entity_tokens, max_relation=params.max_relation_tokens)


def describe(retrieval: Retrieval, budget: Budget) -> dict[str, Any]:
    context = retrieval.context
    return {
        "query": retrieval.query, "mode": retrieval.mode, "skipped": retrieval.skipped,
        "keywords": retrieval.keywords.as_dict() if retrieval.keywords else None,
        "entities": [{"name": e.name, "type": e.type, "description": e.description, "score": round(e.score, 4),
                      "degree": e.degree, "sources": len(e.source_ids)} for e in (context.entities if context else [])],
        "relations": [{"source": r.source_name, "target": r.target_name, "keywords": r.keywords,
                       "description": r.description, "weight": r.weight, "score": round(r.score, 4),
                       "degree": r.degree} for r in (context.relations if context else [])],
        "chunks": [{"id": c.id, "content": c.content, "score": round(c.score, 4), "origin": c.origin,
                    "documents": c.documents} for c in (context.chunks if context else [])],
        "references": [{"id": n, "document": name} for n, name in (context.references if context else [])],
        "context": context.text if context else "",
        "tokens": context.tokens if context else {},
        "timings": retrieval.timings, "budget": budget.as_dict(),
    }


async def query(request: Request) -> Response:
    kb = knowledge(request)
    settings = request.app.state.gateway.settings
    body = parse_object(await read_body(request, settings.max_body_bytes))
    text = body.get("query")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("query is required")
    history = _history(body)
    params = QueryParams.from_settings(settings).with_overrides(body)
    messages = [*history, {"role": "user", "content": text}]
    budget = _budget(request, body, messages, params)
    if budget.reason:
        result = describe(Retrieval(text, params.mode, None, None, skipped=budget.reason), budget)
    else:
        retrieval = await kb.retriever.retrieve(text, [(m["role"], m["content"]) for m in history], params, budget)
        result = describe(retrieval, budget)
        if body.get("answer"):
            model = body.get("model") or await kb.models.chat_model()
            final = inject(messages, result["context"]) if result["context"] else messages
            reply = await kb.models.upstream.call_json("POST", "/api/chat", {"model": model, "messages": final,
                                                                             "stream": False})
            result["answer"] = kb.models.upstream.chat_content(reply)
    kb.record(Trace("query", str(body.get("model") or ""), params.mode, text, bool(result["context"]),
                    result["skipped"], {k: result[k] for k in ("keywords", "tokens", "timings", "budget")}))
    return json_response(result)


async def traces(request: Request) -> Response:
    kb = knowledge(request)
    rows = await kb.store.db.read(recent_traces, 100, 0)
    return json_response({"traces": rows})


ROUTES = [
    Route("/rag/query", query, methods=["POST"]),
    Route("/rag/traces", traces, methods=["GET"]),
]
