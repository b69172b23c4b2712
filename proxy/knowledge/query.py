"""One query of the knowledge base as ``POST /rag/query`` and the console's playground run it:
the request's question, history and knobs checked, the context budget planned, the retrieval run
(or skipped), optionally an answer generated, the trace kept. Exposed as ``knowledge.query``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from proxy.core.errors import BadRequest
from proxy.knowledge.traces import Trace
from proxy.retrieval.budget import Budget, conversation_size, plan_budget
from proxy.retrieval.context import inject
from proxy.retrieval.found import FoundChunk
from proxy.retrieval.params import QueryParams
from proxy.retrieval.retriever import Retrieval

if TYPE_CHECKING:
    from proxy.core.tokens import Tokenizer
    from proxy.knowledge.grounding import Grounded
    from proxy.retrieval.retriever import Retriever
    from proxy.upstream.model_calls import ModelClient


class QueryingKnowledge(Protocol):
    """What a query needs of the knowledge service (``proxy.knowledge.service.Knowledge``)."""

    retriever: Retriever
    models: ModelClient
    tokenizer: Tokenizer

    def record(self, trace: Trace) -> None: ...

    async def ground(self, question: str, history: list[tuple[str, str]], budget: Budget,
                     **how: Any) -> Grounded: ...

ROLES = ("user", "assistant", "system")
# what a query's trace keeps of its result
TRACED = ("keywords", "tokens", "language", "timings", "budget", "rerank", "channels", "shed", "filtered")


@dataclass
class QueryOutcome:
    result: dict[str, Any]            # what /rag/query answers (``describe``), with "answer" when asked
    messages: list[dict[str, Any]]    # the history and the question, as a chat would send them
    skipped: str | None               # why no context could be given (the window is full), when so


def question_of(body: Mapping[str, Any]) -> str:
    text = body.get("query")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("query is required")
    return text


def history_of(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    history = body.get("history") or []
    if not isinstance(history, list) or not all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in history):
        raise BadRequest('history must be a list of {"role": "user" | "assistant", "content": "..."} messages')
    return history


async def plan(knowledge: QueryingKnowledge, body: Mapping[str, Any], messages: list[dict[str, Any]],
               params: QueryParams) -> Budget:
    """The request's ``num_ctx`` as the window to fit, or ``max_total_tokens`` alone when it has
    none; the same plan as a chat turn's (``plan_budget``)."""
    ceilings = (params.max_total_tokens, params.max_entity_tokens, params.max_relation_tokens)
    num_ctx = body.get("num_ctx")
    if num_ctx is None:
        return plan_budget(max_total=ceilings[0], max_entity=ceilings[1], max_relation=ceilings[2])
    if isinstance(num_ctx, bool) or not isinstance(num_ctx, int) or num_ctx < 1:
        raise BadRequest("num_ctx must be a positive whole number")
    return plan_budget(max_total=ceilings[0], max_entity=ceilings[1], max_relation=ceilings[2], window=num_ctx,
                       source="request", conversation=await conversation_size(messages, knowledge.tokenizer),
                       reserve=knowledge.retriever.settings.answer_reserve)


def describe(retrieval: Retrieval, budget: Budget) -> dict[str, Any]:
    """What /rag/query answers, and the playground shows: the context's items (each entity and
    relation with the channels that found it and its fused rank, 1 first) and what each stage did
    ("channels": every channel that ran, with what it found; "timings" per stage)."""
    context = retrieval.context
    result = {
        "query": retrieval.query, "mode": retrieval.mode,
        "skipped": retrieval.skipped or (context.skipped if context else None),
        "keywords": retrieval.keywords.as_dict() if retrieval.keywords else None,
        "channels": retrieval.channels,
        "entities": [{"name": e.name, "type": e.type, "description": e.description, "score": round(e.score, 4),
                      "degree": e.degree, "sources": len(e.source_ids), "channels": e.channels, "rank": rank}
                     for rank, e in enumerate(context.entities if context else [], 1)],
        "relations": [{"source": r.source_name, "target": r.target_name, "keywords": r.keywords,
                       "description": r.description, "weight": r.weight, "score": round(r.score, 4),
                       "degree": r.degree, "channels": r.channels, "rank": rank}
                      for rank, r in enumerate(context.relations if context else [], 1)],
        "chunks": [{"id": c.id, "content": c.content, "score": round(c.score, 4), "origin": c.origin,
                    "documents": c.documents, **_rerank_score(c)} for c in (context.chunks if context else [])],
        "references": [{"id": n, "document": name} for n, name in (context.references if context else [])],
        "context": context.text if context else "",
        "tokens": context.tokens if context else {},
        "language": context.language if context else None,   # the context's wording (proxy/retrieval/wording.py)
        "timings": retrieval.timings, "budget": budget.as_dict(),
    }
    if retrieval.rerank is not None:  # there is a reranker: what it did, or why its order was not used
        result["rerank"] = retrieval.rerank
    if retrieval.shed is not None:  # a stage skipped because many retrievals were in flight
        result["shed"] = retrieval.shed
    if retrieval.filtered is not None:  # a metadata filter: its canonical JSON, the documents it matched
        result["filtered"] = retrieval.filtered
    if retrieval.embedded_by is not None:  # the store's vectors are of another model than GRAPHGATE_EMBED_MODEL
        result["embedded_by"] = retrieval.embedded_by
    if context and context.communities:  # the communities knob is on and summaries were found
        result["communities"] = [{"title": c.title, "summary": c.summary, "score": round(c.score, 4),
                                  "members": len(c.entities)} for c in context.communities]
    return result


def _rerank_score(chunk: FoundChunk) -> dict[str, float]:
    return {} if chunk.rerank_score is None else {"rerank_score": round(chunk.rerank_score, 4)}


async def run_query(knowledge: QueryingKnowledge, body: Mapping[str, Any], *, api: str = "query") -> QueryOutcome:
    """``body`` as /rag/query takes it: query, history, num_ctx, the knobs, hl/ll_keywords, and
    ``answer`` (with ``model``) for a generated answer. ``api`` names the caller in the trace."""
    text = question_of(body)
    history = history_of(body)
    params = QueryParams.from_settings(knowledge.retriever.settings).with_overrides(dict(body))
    messages = [*history, {"role": "user", "content": text}]
    budget = await plan(knowledge, body, messages, params)
    grounded = await knowledge.ground(text, [(m["role"], m["content"]) for m in history], budget, params=params)
    if grounded.retrieval is None:   # the window leaves no room
        result = describe(Retrieval(text, params.mode, None, None, skipped=budget.reason), budget)
    else:
        result = describe(grounded.retrieval, budget)
        if body.get("answer"):
            result["answer"] = await answer(knowledge, body.get("model"), messages, result["context"])
    knowledge.record(Trace(api, str(body.get("model") or ""), params.mode, text, bool(result["context"]),
                           result["skipped"], {k: result[k] for k in TRACED if k in result}))
    return QueryOutcome(result, messages, budget.reason)


async def answer(knowledge: QueryingKnowledge, model: str | None, messages: list[dict[str, Any]], context: str) -> str:
    """The model's whole answer to ``messages`` with ``context`` injected (no streaming)."""
    model = model or await knowledge.models.chat_model()
    final = inject(messages, context) if context else messages
    reply = await knowledge.models.upstream.call_json("POST", "/api/chat", {"model": model, "messages": final,
                                                                            "stream": False})
    return knowledge.models.upstream.chat_content(reply)
