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
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.responses import Response

from proxy.core.errors import GraphGateError, UpstreamError
from proxy.core.language_setting import language_for
from proxy.core.responses import json_bytes
from proxy.gateway.budget_window import window_for
from proxy.gateway.chat import ChatTurn
from proxy.gateway.forward import forward
from proxy.gateway.prefixes import TurnControl, header_filter, header_mode, parse_prefix
from proxy.gateway.synthetic import ollama_reply, openai_reply
from proxy.knowledge.traces import Trace
from proxy.retrieval.budget import Budget, conversation_size, conversation_tokens, message_text, plan_budget
from proxy.retrieval.context import context_summary, inject
from proxy.retrieval.params import QueryParams
from proxy.retrieval.retriever import Retrieval
from proxy.retrieval.wording import wording_for
from proxy.upstream.model_calls import cache_key

if TYPE_CHECKING:
    from proxy.core.settings import Settings
    from proxy.gateway.chat import Grounding
    from proxy.knowledge.service import Knowledge
    from proxy.monitoring.metrics import Metrics


class AugmenterGateway(Protocol):
    """What the augmenter reads of the gateway (``proxy.state.Gateway``): the knowledge service
    appears once the store has opened, and stays None when it cannot."""

    settings: Settings
    knowledge: Knowledge | None
    metrics: Metrics

log = logging.getLogger("graphgate.augment")


# --- Open WebUI's background tasks -------------------------------------------------------------
#
# Open WebUI asks the chat model for titles, tags, follow-ups, search/retrieval queries, emojis,
# autocompletions, image prompts, tool choices and mixture-of-agents merges. None of these are
# questions for the knowledge base: augmenting them costs a keyword call and retrieval, and puts
# context where Open WebUI expects bare JSON. Open WebUI marks them on the wire only when told to
# (the X-Task header through OLLAMA_API_CONFIGS, see docs/clients.md; it drops `metadata.task` before
# sending), so they are also recognised by the text of its default templates (config.py), as
# backend/open_webui/utils/task.py renders them: {{MESSAGES:END:n}} becomes "ROLE: content" lines,
# {{prompt}}/{{PROMPT}}, {{TYPE}}, {{CURRENT_DATE}}, {{TOOLS}} and {{responses}} are filled in.
#
# Conservative on purpose: only fixed sentences of the templates are matched, never the variable
# parts, and only in the place Open WebUI puts them (the turn's one user message, after nothing but
# system messages; for tool choice, the system message). Someone typing "### Task: ..." in a chat
# is still augmented: the "### Task:" shape also needs Open WebUI's rendered <chat_history> block
# ("USER: ..." lines, or nothing), which prose does not contain.

_TASK_HEADING = "### Task:"
_CHAT_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.S)
_RENDERED_HISTORY = re.compile(r"\A\s*(?:\Z|[A-Z][A-Z_]*: )")  # empty, or get_messages_content's "ROLE: ..."
# which "### Task:" template, from its task line (the first paragraph under the heading); the
# phrases hold for the current defaults and for the older ones (e.g. "Generate a concise, 3-5 word
# title with an emoji ..."), and are tried in this order
_TASK_LINES = (
    ("autocomplete", re.compile(r"\bautocompletion system\b", re.I)),
    # "Suggest 3-5 relevant follow-up questions ..." until 0.11; "Predict 3-5 useful messages this
    # user might naturally send next ..." in 0.12
    ("follow-ups", re.compile(r"\bfollow-up questions\b|\bmight naturally send next\b", re.I)),
    ("tags", re.compile(r"\btags\b", re.I)),
    ("query generation", re.compile(r"\bsearch queries\b", re.I)),
    ("image prompt", re.compile(r"\bimage generation\b", re.I)),
    ("title", re.compile(r"\btitle\b", re.I)),
)
_EMOJI_OPENING = "Your task is to reflect the speaker's likely facial expression through a fitting emoji."
_EMOJI_MESSAGE = re.compile(r"\n\s*Message: ```.*```\s*\Z", re.S)
_MOA_OPENING = "You have been provided with a set of responses from various models to the latest user query: \""
_MOA_TASK = "Your task is to synthesize these responses into a single, high-quality response."
_MOA_RESPONSES = "\nResponses from models: "
_TOOLS_HEADING = "Available Tools: "
_TOOLS_TASK = ("Your task is to choose and return the correct tool(s) from the list of available tools "
               "based on the query.")
_TOOLS_QUERY = re.compile(r"\A(?:Query: |History:\n.*\nQuery: )", re.S)  # old and current shapes


def _task_template(text: str) -> str | None:
    """Which Open WebUI task a user message's text is the rendered template of, if any."""
    text = text.lstrip()
    if text.startswith(_TASK_HEADING):
        history = _CHAT_HISTORY.search(text)
        if history is None or not _RENDERED_HISTORY.match(history.group(1)):
            return None
        task_line = text[len(_TASK_HEADING):].strip().split("\n\n", 1)[0].split("\n#", 1)[0]
        return next((name for name, pattern in _TASK_LINES if pattern.search(task_line)), "'### Task:' template")
    if text.startswith(_EMOJI_OPENING) and _EMOJI_MESSAGE.search(text):
        return "emoji"
    if text.startswith(_MOA_OPENING) and _MOA_TASK in text and _MOA_RESPONSES in text:
        return "mixture of agents"
    return None


def _tools_template(text: str) -> bool:
    """Open WebUI's tool-choice template, in a system message (maybe after the model's own prompt)."""
    heading = text.find(_TOOLS_HEADING)
    return heading >= 0 and _TOOLS_TASK in text[heading:] and '"tool_calls"' in text[heading:]


def recognise_task(turn: ChatTurn) -> tuple[str, str] | None:
    """(task, how it was recognised) for an Open WebUI background task, or None. The X-Task
    header wins; its templates are the fallback."""
    task = turn.headers.get("x-task", "").strip()
    if task and not task.startswith("{{"):  # an unsubstituted template means "no task"
        return task, "X-Task header"
    messages = turn.messages
    if not messages or not all(isinstance(m, dict) for m in messages):
        return None
    *before, last = messages
    if last.get("role") != "user" or any(m.get("role") != "system" for m in before):
        return None  # a task is one user message, after at most system messages
    text = message_text(last)
    name = _task_template(text)
    if name is None and before and _TOOLS_QUERY.match(text) and any(_tools_template(message_text(m))
                                                                      for m in before):
        name = "tools function calling"
    return (name, "template") if name else None


# a task's trace keeps the start of its prompt: the rest is Open WebUI's template and a copy of the
# chat history, several KB each, four or five times per chat turn
TASK_QUERY_CHARS = 200


def describe_task(task: str, how: str) -> str:
    source = "from the X-Task header" if how == "X-Task header" else "recognised by its template"
    return f"background task ({task}, {source})"


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

        Every turn that is not augmented leaves a trace saying why (see ``_skip``)."""
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
        setting = (knowledge.retriever.settings if knowledge is not None else self.gateway.settings).language
        return await self._context_reply(turn, wording_for(language or language_for(setting, question)).nothing_found,
                                   started)

    def _knowledge(self, turn: ChatTurn) -> Knowledge | None:
        """The knowledge base of the turn (its grounding; ``default`` for a turn no stage grounded)."""
        return turn.grounding.knowledge if turn.grounding is not None else self.gateway.knowledge

    async def generate(self, request: Any, body: dict[str, Any], raw: bytes,
                       grounding: Grounding | None = None, client_model: str | None = None) -> bytes:
        """/api/generate (only with GRAPHGATE_AUGMENT_GENERATE): the prompt is the question and the
        context joins the `system` field. Raw prompts and model loads are forwarded as they are."""
        prompt = body.get("prompt")
        if body.get("raw") or not isinstance(prompt, str) or not prompt.strip():
            return raw
        messages = [{"role": "user", "content": prompt}]
        if isinstance(body.get("system"), str) and body["system"]:
            messages.insert(0, {"role": "system", "content": body["system"]})
        pseudo = ChatTurn("ollama", request.url.path, request.headers, {**body, "messages": messages}, raw, request,
                          grounding=grounding)
        pseudo.client_model = client_model or pseudo.client_model   # a knowledge model's name, in its traces
        result = await self(pseudo, whole_turn_only=True)
        if not isinstance(result, ChatTurn) or not result.changed:
            return raw
        out = {k: v for k, v in result.body.items() if k != "messages"}
        final = result.body["messages"]
        out["prompt"] = final[-1]["content"]
        if final[0].get("role") == "system":
            out["system"] = final[0]["content"]
        return json_bytes(out)

    async def _augment(self, turn: ChatTurn, control: TurnControl, mode: str, info: Any, at: int, *,
                       cache: bool) -> ChatTurn | Response:
        started = time.perf_counter()
        knowledge, settings = self._knowledge(turn), self.gateway.settings
        assert knowledge is not None
        query = message_text(turn.messages[at]).strip()
        trace = Trace("ollama" if turn.flavour == "ollama" else "openai", turn.client_model, mode, query, False)
        budget = await self._budget(turn, info)
        trace.detail["budget"] = budget.as_dict()
        if budget.reason:
            log.info("not augmenting a %s turn: %s", turn.model, budget.reason)
            self._finish(turn, trace, budget.reason)
            return await self._nothing_found(turn, query, started) if control.context_only else turn
        params = QueryParams.from_settings(settings, mode=mode, instructions=control.instructions,
                                           filters=control.filters)
        try:
            with anyio.fail_after(settings.retrieval_timeout):
                retrieval = await knowledge.retrieve(query, history_of(turn.messages, at), params, budget)
        except (TimeoutError, GraphGateError, UpstreamError) as exc:
            message = "retrieval timed out" if isinstance(exc, TimeoutError) else f"retrieval failed: {exc}"
            log.warning("forwarding a %s turn without context: %s", turn.model, message)
            self._finish(turn, trace, message)
            if control.context_only:
                return await self._context_reply(turn, f"(Retrieval failed: {message}.)", started)
            return turn
        except Exception as exc:  # noqa: BLE001 - a retrieval bug must not break the chat
            log.exception("retrieval failed")
            self._finish(turn, trace, f"retrieval failed: {type(exc).__name__}")
            return await self._context_reply(turn, "(Retrieval failed.)", started) if control.context_only else turn
        self._describe(trace, retrieval)
        if control.context_only:
            self._finish(turn, trace, "context requested (/context)")
            if retrieval.context is None or retrieval.empty:
                worded = retrieval.context.language if retrieval.context else None
                return await self._nothing_found(turn, query, started, worded)
            return await self._context_reply(turn, retrieval.context.text, started)
        if retrieval.empty:   # the context says why when the budget could not hold its instructions
            reason = retrieval.skipped or (retrieval.context.skipped if retrieval.context else None)
            return self._finish(turn, trace, reason or "nothing relevant found")
        assert retrieval.context is not None
        turn.with_messages(inject(turn.messages, retrieval.context.text))
        if budget.raised_num_ctx:
            turn.body = {**turn.body, "options": {**(turn.body.get("options") or {}), "num_ctx": budget.raised_num_ctx}}
        trace.augmented = True
        self._finish(turn, trace, None)
        if settings.answer_cache and not turn.streaming and cache:
            return await self._cached_answer(turn)
        return turn

    async def _budget(self, turn: ChatTurn, info: Any) -> Budget:
        settings = self.gateway.settings
        conversation = await conversation_size(turn.messages, self._knowledge(turn).tokenizer)  # type: ignore[union-attr]
        options = turn.body.get("options") if turn.flavour == "ollama" else None
        window, source, raised = window_for(options if isinstance(options, dict) else None, info, settings,
                                            conversation, can_raise=turn.flavour == "ollama")
        # the one plan of every surface (/rag/query's too): the window lowers the total, the sections scale with it
        budget = plan_budget(window=window, source=source, conversation=conversation, reserve=settings.answer_reserve,
                             max_total=settings.max_total_tokens, max_entity=settings.max_entity_tokens,
                             max_relation=settings.max_relation_tokens)
        return replace(budget, raised_num_ctx=window) if raised else budget

    def _describe(self, trace: Trace, retrieval: Retrieval) -> None:
        trace.detail["keywords"] = retrieval.keywords.as_dict() if retrieval.keywords else None
        trace.detail["timings"] = retrieval.timings
        if retrieval.rerank is not None:  # what the reranker did, or why the fused order was kept
            trace.detail["rerank"] = retrieval.rerank
        if retrieval.shed is not None:  # a stage skipped under a burst of chats
            trace.detail["shed"] = retrieval.shed
        if retrieval.filtered is not None:  # the turn's metadata filter (header or prefix)
            trace.detail["filtered"] = retrieval.filtered
        if retrieval.embedded_by is not None:  # the store's vectors are of another model than GRAPHGATE_EMBED_MODEL
            trace.detail["embedded_by"] = retrieval.embedded_by
        if retrieval.context is not None:
            trace.detail.update(context_summary(retrieval.context))

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
            knowledge.record(Trace("ollama" if turn.flavour == "ollama" else "openai", turn.client_model,
                                   mode or self.gateway.settings.mode, query, False, reason, detail or {}))
        return turn

    async def _context_reply(self, turn: ChatTurn, text: str, started: float) -> Response:
        knowledge = self._knowledge(turn)
        if knowledge is None:
            prompt, tokens = conversation_tokens(turn.messages, len), len(text)
        else:
            prompt = await conversation_size(turn.messages, knowledge.tokenizer)
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
