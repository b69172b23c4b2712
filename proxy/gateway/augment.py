"""The chat pipeline's retrieval stage: decide whether a turn is augmented, retrieve, inject.

Forwarded untouched: Open WebUI background tasks, /bypass turns, "continue" (assistant last) and
tool turns, model loads (no messages), models without the completion capability, and every turn
while the knowledge base is empty or unavailable, or the upstream cannot describe the model
(/api/show). Every such turn leaves a trace with its reason (GET /rag/traces, the console's Chats
page). Retrieval never blocks a chat: on any failure or timeout the turn goes upstream without
context, and the failure is logged and traced.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from starlette.responses import Response

from proxy.core.errors import GraphGateError
from proxy.core.messages import conversation_tokens, message_text
from proxy.gateway.chat import ChatTurn
from proxy.gateway.forward import forward
from proxy.gateway.prefixes import TurnControl, header_filter, header_mode, parse_prefix
from proxy.gateway.synthetic import ollama_reply, openai_reply
from proxy.gateway.tasks import TASK_QUERY_CHARS, describe_task, recognise_task
from proxy.knowledge.grounding import nothing_found
from proxy.knowledge.traces import Trace
from proxy.upstream.model_calls import cache_key

if TYPE_CHECKING:
    from proxy.core.settings_sections import ChatSettings
    from proxy.knowledge.service import Knowledge
    from proxy.monitoring.metrics import Metrics


class AugmenterGateway(Protocol):
    """What the augmenter reads of the gateway (``proxy.state.Gateway``): the knowledge service
    appears once the store has opened, and stays None when it cannot."""

    knowledge: Knowledge | None
    metrics: Metrics

    @property
    def settings(self) -> ChatSettings: ...


log = logging.getLogger("graphgate.augment")


def shape_reason(turn: ChatTurn) -> str | None:
    messages = turn.messages
    if not messages:
        return "no messages (model load or unload)"
    if not all(isinstance(m, dict) for m in messages):
        return "malformed messages (left for the upstream to refuse)"
    role = messages[-1].get("role")
    if role == "assistant":
        return "continuation of an assistant message"
    if role == "tool":
        return None if question_at(messages) is not None else "tool result with no question before it"
    if role != "user":
        return f"last message is from {role!r}"
    return None


def first_text(message: dict[str, Any]) -> str:
    """Where a prefix can stand: the content, or the first text part of an OpenAI parts list."""
    content = message.get("content")
    if isinstance(content, list):
        text = next((p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"), "")
        return text if isinstance(text, str) else ""
    return content if isinstance(content, str) else ""


def with_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """The message with its text replaced (the first text part of an OpenAI parts list)."""
    out = dict(message)
    if isinstance(message.get("content"), list):
        parts = copy.deepcopy(message["content"])
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "text":
                part["text"] = text
                break
        out["content"] = parts
    else:
        out["content"] = text
    return out


def question_at(messages: list[dict[str, Any]]) -> int | None:
    """Where a turn's question is: its last message, or, for a tool continuation (the model called a
    tool and the client sends back its result), the user message that started it. Grounding the
    continuation again matters: the client resends its own messages, without the context injected
    into the turn that called the tool, and the answer is written in this turn (Open WebUI 0.12
    offers its built-in tools with every chat)."""
    if messages and messages[-1].get("role") != "tool":
        return len(messages) - 1
    for index in range(len(messages) - 1, -1, -1):
        role = messages[index].get("role")
        if role == "user":
            return index
        if role not in ("tool", "assistant"):
            return None
    return None


def history_of(messages: list[dict[str, Any]], at: int) -> list[tuple[str, str]]:
    """The conversation before the question at ``at``."""
    return [(m["role"], message_text(m)) for m in messages[:at]
            if m.get("role") in ("user", "assistant") and message_text(m).strip()]


class Augmenter:
    def __init__(self, gateway: AugmenterGateway) -> None:
        self.gateway = gateway

    async def __call__(self, turn: ChatTurn, *, whole_turn_only: bool = False) -> ChatTurn | Response:
        """``whole_turn_only``: never answer the client directly (no /context reply, no cached
        answer), for /api/generate, whose replies have another shape.

        Every turn that is not augmented leaves a trace saying why (see ``_skip``). A completion
        (/api/generate) is augmented only with GRAPHGATE_AUGMENT_GENERATE, and only when it has a
        prompt that is not raw (else it is forwarded as it is, with no trace), and is never answered
        directly: its replies have another shape."""
        if turn.flavour == "generate":
            if not self.gateway.settings.augment_generate or not turn.messages:
                return turn
            whole_turn_only = True
        task = recognise_task(turn)
        if task:
            return self._skip(turn, describe_task(*task), detail={"task": task[0], "recognised_by": task[1]},
                              query_chars=TASK_QUERY_CHARS)
        reason = shape_reason(turn)
        if reason:
            return self._skip(turn, reason)
        at = question_at(turn.messages)
        assert at is not None   # shape_reason let it through
        prefixed = first_text(turn.messages[at])
        control = parse_prefix(prefixed)
        header = None if control.mode else header_mode(turn.headers.get("x-graphgate-mode"))
        if control.filters is None:
            control = replace(control, filters=header_filter(turn.headers.get("x-graphgate-filter")))
        grounding = turn.grounding
        mode = control.mode or header or (grounding.mode if grounding else None) or self.gateway.settings.mode
        if control.text != prefixed:
            messages = list(turn.messages)
            messages[at] = with_text(messages[at], control.text)
            turn = turn.with_messages(messages)
        if whole_turn_only or at != len(turn.messages) - 1:   # a continuation is answered by the model
            control = replace(control, context_only=False)
        if mode == "bypass":
            source = ("the /bypass prefix" if control.mode else "the X-GraphGate-Mode header" if header
                      else f"knowledge model {turn.client_model!r}" if grounding and grounding.mode
                      else "GRAPHGATE_MODE")
            return self._skip(turn, f"bypass mode (from {source})", mode)
        knowledge = self._knowledge(turn)
        if knowledge is None and grounding is not None and grounding.reason:
            self._skip(turn, grounding.reason, mode)
            return await self._nothing_found(turn, control.text, time.perf_counter()) if control.context_only else turn
        if knowledge is None or not knowledge.has_chunks():
            # the knowledge base is empty or unavailable
            self._skip(turn, "the knowledge base is empty (no processed documents)", mode)
            return await self._nothing_found(turn, control.text, time.perf_counter()) if control.context_only else turn
        try:
            info = await knowledge.model_info.get(turn.model)
        except GraphGateError as exc:
            # let the upstream answer for an unknown model with its own error; say why here
            log.warning("not augmenting a turn for model %r: its /api/show failed: %s", turn.model, exc.message)
            return self._skip(turn, f"/api/show failed for model {turn.model!r}: {exc.message}", mode)
        if "completion" not in info.capabilities:
            capabilities = ", ".join(info.capabilities) or "none"
            return self._skip(turn, f"model {turn.model!r} cannot chat (capabilities: {capabilities})", mode)
        return await self._augment(turn, control, mode, info, at, cache=not whole_turn_only)

    async def _nothing_found(self, turn: ChatTurn, question: str, started: float,
                             language: str | None = None) -> Response:
        """A ``/context`` turn's reply when there is no context to give: said in the turn's language
        (the context's, else the knowledge base's ``language`` setting, else the question's)."""
        knowledge = self._knowledge(turn)
        if knowledge is not None:
            text = knowledge.nothing_found(question, language)
        else:
            text = nothing_found(self.gateway.settings.language, question, language)
        return await self._context_reply(turn, text, started)

    def _knowledge(self, turn: ChatTurn) -> Knowledge | None:
        """The knowledge base of the turn (its grounding; ``default`` for a turn no stage grounded)."""
        return turn.grounding.knowledge if turn.grounding is not None else self.gateway.knowledge

    async def _augment(self, turn: ChatTurn, control: TurnControl, mode: str, info: Any, at: int, *,
                       cache: bool) -> ChatTurn | Response:
        started = time.perf_counter()
        knowledge, settings = self._knowledge(turn), self.gateway.settings
        assert knowledge is not None
        query = message_text(turn.messages[at]).strip()
        trace = Trace("openai" if turn.flavour == "openai" else "ollama", turn.client_model, mode, query, False)
        options = turn.body.get("options") if turn.flavour != "openai" else None   # /v1 has no options to raise
        budget = await knowledge.chat_budget(turn.messages, options if isinstance(options, dict) else None, info,
                                             can_raise=turn.flavour != "openai")
        grounded = await knowledge.ground(query, history_of(turn.messages, at), budget, mode=mode,
                                          instructions=control.instructions, filters=control.filters,
                                          patience=settings.retrieval_timeout)
        trace.detail.update(grounded.detail())
        if budget.reason:
            log.info("not augmenting a %s turn: %s", turn.model, budget.reason)
            self._finish(turn, trace, budget.reason)
            return await self._nothing_found(turn, query, started) if control.context_only else turn
        if grounded.failure:
            log.warning("forwarding a %s turn without context: %s", turn.model, grounded.failure)
            self._finish(turn, trace, grounded.failure)
            if control.context_only:
                return await self._context_reply(turn, f"(Retrieval failed: {grounded.failure}.)", started)
            return turn
        if control.context_only:
            self._finish(turn, trace, "context requested (/context)")
            if grounded.context is None:
                return await self._nothing_found(turn, query, started, grounded.language)
            return await self._context_reply(turn, grounded.context, started)
        if grounded.context is None:   # the context says why when the budget could not hold its instructions
            return self._finish(turn, trace, grounded.reason)
        turn.with_messages(grounded.injected(turn.messages))
        if budget.raised_num_ctx:
            turn.body = {**turn.body, "options": {**(turn.body.get("options") or {}), "num_ctx": budget.raised_num_ctx}}
        trace.augmented = True
        self._finish(turn, trace, None)
        if settings.answer_cache and not turn.streaming and cache:
            return await self._cached_answer(turn)
        return turn

    def _finish(self, turn: ChatTurn, trace: Trace, reason: str | None) -> ChatTurn:
        trace.reason = reason
        self._knowledge(turn).record(trace)  # type: ignore[union-attr]
        return turn

    def _skip(self, turn: ChatTurn, reason: str, mode: str | None = None, *,
              detail: dict[str, Any] | None = None, query_chars: int | None = None) -> ChatTurn:
        """Forward the turn as it is, leaving a trace with the reason (GET /rag/traces, the console's
        Chats page). Without a store (it could not be opened) there is nowhere to keep one; the
        store's failure was logged at start-up."""
        knowledge = self._knowledge(turn)
        if knowledge is not None:
            messages = turn.messages
            last = messages[-1] if messages else None
            query = message_text(last) if isinstance(last, dict) else ""
            if query_chars is not None and len(query) > query_chars:
                query = query[:query_chars] + "…"
            knowledge.record(Trace("openai" if turn.flavour == "openai" else "ollama", turn.client_model,
                                   mode or self.gateway.settings.mode, query, False, reason, detail or {}))
        return turn

    async def _context_reply(self, turn: ChatTurn, text: str, started: float) -> Response:
        knowledge = self._knowledge(turn)
        if knowledge is None:
            prompt, tokens = conversation_tokens(turn.messages, len), len(text)
        else:
            prompt = await knowledge.conversation_size(turn.messages)
            tokens = knowledge.tokenizer.count(text)
        if turn.flavour == "ollama":
            return ollama_reply(turn.client_model, text, stream=turn.streaming, started=started, prompt_tokens=prompt,
                                tokens=tokens)
        usage = bool((turn.body.get("stream_options") or {}).get("include_usage"))
        return openai_reply(turn.client_model, text, stream=turn.streaming, prompt_tokens=prompt, tokens=tokens,
                            include_usage=usage)

    async def _cached_answer(self, turn: ChatTurn) -> Response:
        """Non-streaming answers cached under the request and the knowledge-base generation, so
        that any change to the documents makes them miss (LightRAG#755)."""
        knowledge = self._knowledge(turn)
        assert knowledge is not None
        payload = turn.payload()
        key = cache_key(turn.model, [turn.path, payload.decode("utf-8", "replace"), knowledge.generation])
        cached = await knowledge.cached("answer", key)
        if cached is not None:
            return Response(cached.encode(), media_type="application/json; charset=utf-8",
                            headers={"x-graphgate-cache": "hit"})
        with self.gateway.metrics.upstream_call("chat_relay", turn.kb) as call:   # a cache miss goes upstream
            response = await forward(turn.request, content=payload)
            call.status = response.status_code if isinstance(response, Response) else 0
        if isinstance(response, Response) and response.status_code == 200:
            knowledge.remember_answer(turn.model, key, payload, bytes(response.body))
        return response  # type: ignore[return-value]
