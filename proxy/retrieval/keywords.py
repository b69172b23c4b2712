"""Keyword extraction for a chat turn: one structured-output call that sees the question together
with the previous turns, so that "and who leads it?" resolves to the entity talked about before."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import anyio

from proxy.core import json_text
from proxy.core.errors import GraphGateError
from proxy.core.limiter import Busy, Priority
from proxy.upstream.model_calls import CacheEntry, ModelClient

KEYWORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "high_level_keywords": {"type": "array", "items": {"type": "string"}},
        "low_level_keywords": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["high_level_keywords", "low_level_keywords"],
}

_SYSTEM = """You prepare searches in a knowledge graph. Given the latest question of a conversation, \
list keywords for two searches:
- "low_level_keywords": the specific things the question is about: names of people, organisations, \
places, products, terms, exactly as they would appear in documents. Resolve pronouns and references \
("it", "they", "that company") to the names used earlier in the conversation.
- "high_level_keywords": the broader themes or kinds of relationship the question asks about.
Give at most 8 of each, short, without explanations. Answer with JSON only."""

SHORT_QUERY = 50  # a question shorter than this becomes its own keyword when none are found


@dataclass(frozen=True)
class QuestionKeywords:
    high: tuple[str, ...]
    low: tuple[str, ...]
    source: str                 # "llm", "cache", "given", "off", "busy", "late", "fallback"
    entry: CacheEntry | None = None

    @property
    def from_question(self) -> bool:
        """No keyword lists: the question's own embedding stands in for both (off, upstream busy, or
        the call not back within the turn's keyword budget)."""
        return self.source in ("off", "busy", "late")

    def as_dict(self) -> dict[str, Any]:
        return {"high_level": list(self.high), "low_level": list(self.low), "source": self.source}


def keyword_messages(query: str, history: list[tuple[str, str]]) -> list[dict[str, str]]:
    lines = [f"{role.upper()}: {text}" for role, text in history]
    earlier = "Earlier turns:\n" + "\n".join(lines) + "\n\n" if lines else ""
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"{earlier}Latest question: {query}"}]


def _clean(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        return ()
    out = dict.fromkeys(" ".join(v.split())[:100] for v in values if isinstance(v, str) and v.strip())
    return tuple(out)[:8]


async def extract_keywords(models: ModelClient, query: str, history: list[tuple[str, str]],
                           model: str | None, slot_wait: float | None = None) -> QuestionKeywords:
    # normalised text in the prompt: equivalent questions share one cache entry
    messages = keyword_messages(" ".join(query.split()), [(r, " ".join(t.split())) for r, t in history])
    try:
        reply = await models.structured("keywords", messages, KEYWORD_SCHEMA, priority=Priority.CHAT, model=model,
                                        slot_wait=slot_wait)
    except Busy:  # the upstream is saturated: search with the question itself rather than delay the chat
        return QuestionKeywords((), (), "busy")
    try:
        data = json_text.loads(reply.content, max_depth=json_text.BODY_DEPTH)   # a model's reply
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    keywords = QuestionKeywords(_clean(data.get("high_level_keywords")), _clean(data.get("low_level_keywords")),
                        "cache" if reply.cached else "llm", None if reply.cached else reply.entry)
    return keywords


def fallback(keywords: QuestionKeywords, query: str) -> QuestionKeywords | None:
    """LightRAG's rule: no keywords at all -> a short question is its own low-level keyword,
    a long one gets no context."""
    if keywords.high or keywords.low:
        return keywords
    if len(query.strip()) < SHORT_QUERY:
        return QuestionKeywords((), (query.strip(),), "fallback", keywords.entry)
    return None


LATE = QuestionKeywords((), (), "late")


class ArrivingKeywords:
    """A turn's keywords, on their way while the turn searches with what needs none. The turn
    takes them if they are back by its deadline, else goes on with the question alone (``LATE``)."""

    def __init__(self, value: QuestionKeywords | None = LATE) -> None:
        self.value: QuestionKeywords | None = value
        self.error: GraphGateError | None = None
        self.done = anyio.Event()
        self.inline: Awaitable[QuestionKeywords | None] | None = None

    @classmethod
    def ready(cls, value: QuestionKeywords | None) -> ArrivingKeywords:
        arriving = cls(value)
        arriving.done.set()
        return arriving

    async def fill(self, call: Awaitable[QuestionKeywords | None]) -> None:
        try:
            self.value = await call
        except GraphGateError as exc:   # the turn that waits for it says so; one that did not, never hears
            self.error = exc
        finally:
            self.done.set()

    async def wait(self, deadline: float) -> QuestionKeywords | None:
        """The keywords if back by ``deadline`` (``time.perf_counter()``), else ``LATE``."""
        if self.inline is not None:
            call, self.inline = self.inline, None
            await self.fill(call)
        with anyio.move_on_after(max(0.0, deadline - time.perf_counter())):
            await self.done.wait()
        if not self.done.is_set():
            return LATE
        if self.error is not None:
            raise self.error
        return self.value
