"""The playground: ``/rag/query`` from a form, every knob at hand, every step shown (keywords,
entities, relations, chunks, the context, token counts, budget, what a metadata filter matched);
optionally the answer. Its stages panel shows what each retrieval stage contributed: the timings,
each channel's finds, where the keywords came from, what the reranker did; each entity and
relation its channels and fused rank.

Retrieval runs exactly as ``POST /rag/query`` runs it (``knowledge.query``); the form's knobs,
their bounds, choices and help come from the settings table (``proxy.retrieval.params``). An htmx
request gets the result fragment, in which the answer streams over SSE: the POST leaves a short-lived, single-use
record (model and messages, the context injected) under a random token, and
``GET /playground/answer/{token}`` streams the model's reply, HTML-escaped piece by piece, ending
with a ``done`` (or ``error``) event that replaces the stream's container with the static answer,
after which the page's script (templates/static/console.js) closes the EventSource. Without JavaScript the
full page is rendered with the answer generated inline.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin.guard import action
from admin.rendering import is_htmx, render
from proxy.control.pending import PendingAnswer
from proxy.core.errors import BadRequest, GraphGateError, NotFound
from proxy.core.settings_sections import PlaygroundSettings
from proxy.knowledge.query import ROLES, question_of
from proxy.retrieval.context import inject
from proxy.retrieval.params import CHOICE_KNOBS, NUMBER_KNOBS, QueryParams, knob_of
from proxy.state import gateway_of, knowledge, playground_settings

RECONNECT_MS = 86_400_000   # an EventSource whose stream ended must not come back for the used token

NUMBERS = tuple(setting.name for setting in NUMBER_KNOBS)
CHOICES = {setting.name: knob_of(setting).choices for setting in CHOICE_KNOBS}
CHOICE_HELP = {setting.name: setting.help for setting in CHOICE_KNOBS}   # the select's tooltip
TEXT_FIELDS = ("query", "num_ctx", "hl_keywords", "ll_keywords", "filters", "history", "model", "answer")


def knobs() -> list[dict[str, Any]]:
    return [{"name": setting.name, "help": setting.help, "low": f"{knob.low:g}", "high": f"{knob.high:g}",
             "step": "1" if knob.kind is int else "any"} for setting in NUMBER_KNOBS for knob in [knob_of(setting)]]


def defaults(settings: PlaygroundSettings) -> dict[str, str]:
    """The form's values: the effective settings for every knob, the rest empty."""
    params = QueryParams.from_settings(settings)
    values = {name: str(getattr(params, name)) for name in (*NUMBERS, *CHOICES)}
    return {**values, **dict.fromkeys(TEXT_FIELDS, "")}


def submitted(form: Any) -> dict[str, str]:
    values = {}
    for name in (*NUMBERS, *CHOICES, *TEXT_FIELDS):
        value = form.get(name)
        values[name] = (value if name in ("query", "history") else value.strip()) if isinstance(value, str) else ""
    return values


def _number(text: str) -> Any:
    """A form field as a number when it reads as one; otherwise the text, which the API's own
    validation refuses with its message (``top_k must be a whole number``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def overrides(values: dict[str, str]) -> dict[str, Any]:
    """The form as a /rag/query body (blank fields: the settings apply)."""
    body: dict[str, Any] = {name: _number(values[name]) for name in (*NUMBERS, "num_ctx") if values[name]}
    body.update({name: values[name] for name in CHOICES if values[name]})
    body.update({name: values[name].split(",") for name in ("hl_keywords", "ll_keywords") if values[name]})
    if values["filters"]:  # the metadata filter's JSON text, read (and refused) as the API reads it
        body["filters"] = values["filters"]
    return body


def parse_history(text: str) -> list[dict[str, str]]:
    """``user: ...`` / ``assistant: ...`` lines (``system:`` too) as chat messages."""
    messages = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        role, colon, content = line.partition(":")
        if not colon or role.strip().lower() not in ROLES or not content.strip():
            raise BadRequest(f"history line {number} should read \"user: ...\" or \"assistant: ...\", "
                             f"not {line.strip()[:80]!r}")
        messages.append({"role": role.strip().lower(), "content": content.strip()})
    return messages


# --- pending answers: short-lived, single use, bound to the session (proxy/control/pending.py) ---

def _session(request: Request) -> str | None:
    session = request.scope.get("state", {}).get("session")
    return getattr(session, "sid", None)


async def remember(request: Request, model: str, messages: list[dict[str, Any]]) -> str:
    token = secrets.token_urlsafe(18)
    await request.app.state.gateway.console.pending.put(token, PendingAnswer(_session(request), model, messages))
    return token


async def take(request: Request, token: str) -> PendingAnswer:
    pending = await request.app.state.gateway.console.pending.take(token)
    if pending is None or pending.session != _session(request):
        raise NotFound("this answer has expired or was already shown; run the query again")
    return pending


def escaped(piece: str) -> str:
    """Untrusted text as HTML, on one line (an SSE data field must not carry a line break)."""
    return html.escape(piece).replace("\r", "&#13;").replace("\n", "&#10;")


# --- routes ---

def form(settings: PlaygroundSettings) -> dict[str, Any]:
    """What the full page's form needs besides its values."""
    return {"knobs": knobs(), "choices": CHOICES, "choice_help": CHOICE_HELP, "chat_model": settings.llm_model}


async def page(request: Request) -> Response:
    settings = playground_settings(request)
    return render(request, "playground.html", {
        "values": defaults(settings), "result": None, "answer": None, **form(settings),
        "unavailable": gateway_of(request).knowledge_error})


@action
async def run(request: Request) -> Response:
    kb = await knowledge(request)
    settings = playground_settings(request)
    values = submitted(await request.form())
    question_of(values)  # a missing question is the first thing said, before the history's format
    body = {**overrides(values), "query": values["query"], "history": parse_history(values["history"]),
            "model": values["model"]}
    outcome = await kb.query(body, api="console")  # the answer, if asked, is the playground's own (streamed)
    result = outcome.result
    answer = None
    if values["answer"] and not outcome.skipped:
        answer = await prepare_answer(request, values["model"], outcome.messages, result["context"],
                                      stream=is_htmx(request))
    # the keyword budget the query ran with, for the stages panel's "late" (a blank field: the setting's)
    keyword_budget = values["keyword_budget"] or f"{settings.keyword_budget:g}"
    context = {"values": values, "result": result, "answer": answer, "keyword_budget": keyword_budget}
    if is_htmx(request):
        return render(request, "_playground_result.html", context)
    return render(request, "playground.html", {**context, **form(settings), "unavailable": None})


async def prepare_answer(request: Request, model: str, messages: list[dict[str, Any]], context: str, *,
                         stream: bool) -> dict[str, Any]:
    """A token to stream the answer from (htmx), or the answer itself (a plain form post)."""
    kb = await knowledge(request)
    try:
        model = model or await kb.models.chat_model()
    except GraphGateError as exc:
        return {"model": "", "text": "", "error": exc.message}
    final = inject(messages, context) if context else messages
    if stream:
        return {"model": model, "token": await remember(request, model, final)}
    text, error = [], None
    try:
        async for piece in kb.models.upstream.chat_text(model, final):
            text.append(piece)
    except GraphGateError as exc:
        error = exc.message
    return {"model": model, "text": "".join(text), "error": error}


async def answer_stream(request: Request) -> Response:
    upstream = (await knowledge(request)).models.upstream
    pending = await take(request, request.path_params["token"])
    env = request.app.state.gateway.console.env

    async def events() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(comment="answer", retry=RECONNECT_MS)
        text, error = [], None
        try:
            async for piece in upstream.chat_text(pending.model, pending.messages):
                text.append(piece)
                yield ServerSentEvent(escaped(piece), event="token")
        except GraphGateError as exc:
            error = exc.message
        answer = {"model": pending.model, "text": "".join(text), "error": error}
        yield ServerSentEvent(env.get_template("_answer.html").render(answer=answer),
                              event="error" if error else "done")

    return EventSourceResponse(events())


ROUTES = [
    Route("/playground", page, methods=["GET"]),
    Route("/playground", run, methods=["POST"]),
    Route("/playground/answer/{token}", answer_stream, methods=["GET"]),
]
