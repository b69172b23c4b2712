"""Grounding a question in the knowledge base: the one way every surface asks for context (a chat
turn, /api/generate, /rag/query, the playground, MCP). The surface says what it has (the question,
the conversation before it, the window its model runs with, the mode and filter it asked for);
``ground`` plans the budget, retrieves and says what came of it (``Grounded``): the context to
inject, or why there is none, and what a trace keeps. The surfaces never plan a retrieval
themselves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio

from proxy.core.errors import GraphGateError, UpstreamError
from proxy.core.language_setting import language_for
from proxy.knowledge.budget_window import window_for
from proxy.retrieval.budget import Budget, conversation_size, plan_budget
from proxy.retrieval.context import context_summary, inject
from proxy.retrieval.params import QueryParams
from proxy.retrieval.wording import wording_for

if TYPE_CHECKING:
    from proxy.core.metadata import Filter
    from proxy.core.tokens import Tokenizer
    from proxy.retrieval.retriever import Retrieval, Retriever
    from proxy.upstream.model_info import ModelInfo

log = logging.getLogger("graphgate.augment")


@dataclass
class Grounded:
    """What came of grounding one question."""

    budget: Budget
    retrieval: Retrieval | None = None
    failure: str | None = None   # the retrieval failed or timed out (a chat goes on without context)

    @property
    def context(self) -> str | None:
        """The context block to inject, or None when there is nothing to inject."""
        if self.retrieval is None or self.retrieval.empty or self.retrieval.context is None:
            return None
        return self.retrieval.context.text

    @property
    def language(self) -> str | None:
        """The language the context is worded in, when there is one."""
        context = self.retrieval.context if self.retrieval is not None else None
        return context.language if context is not None else None

    @property
    def reason(self) -> str | None:
        """Why there is no context (the window is full, the retrieval failed, nothing relevant)."""
        if self.budget.reason:
            return self.budget.reason
        if self.failure:
            return self.failure
        if self.context is not None:
            return None
        retrieval = self.retrieval
        said = retrieval.skipped or (retrieval.context.skipped if retrieval.context else None) if retrieval else None
        return said or "nothing relevant found"

    def injected(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` with the context joining the front system message (or becoming one)."""
        assert self.context is not None
        return inject(messages, self.context)

    def detail(self) -> dict[str, Any]:
        """What a chat turn's trace keeps of its grounding."""
        detail: dict[str, Any] = {"budget": self.budget.as_dict()}
        retrieval = self.retrieval
        if retrieval is None:
            return detail
        detail["keywords"] = retrieval.keywords.as_dict() if retrieval.keywords else None
        detail["timings"] = retrieval.timings
        if retrieval.rerank is not None:  # what the reranker did, or why the fused order was kept
            detail["rerank"] = retrieval.rerank
        if retrieval.shed is not None:  # a stage skipped under a burst of chats
            detail["shed"] = retrieval.shed
        if retrieval.filtered is not None:  # the turn's metadata filter (header or prefix)
            detail["filtered"] = retrieval.filtered
        if retrieval.embedded_by is not None:  # the store's vectors are of another model than GRAPHGATE_EMBED_MODEL
            detail["embedded_by"] = retrieval.embedded_by
        if retrieval.context is not None:
            detail.update(context_summary(retrieval.context))
        return detail


async def chat_budget(retriever: Retriever, tokenizer: Tokenizer, messages: list[dict[str, Any]],
                      options: dict[str, Any] | None, info: ModelInfo, *, can_raise: bool) -> Budget:
    """The budget of a chat turn: the window its model runs with (the request's ``num_ctx``, the
    model's, or the setting's, raised when GraphGate may raise it) less the conversation."""
    settings = retriever.settings
    conversation = await conversation_size(messages, tokenizer)
    window, source, raised = window_for(options, info, settings, conversation, can_raise=can_raise)
    # the one plan of every surface (/rag/query's too): the window lowers the total, the sections scale with it
    budget = plan_budget(window=window, source=source, conversation=conversation, reserve=settings.answer_reserve,
                         max_total=settings.max_total_tokens, max_entity=settings.max_entity_tokens,
                         max_relation=settings.max_relation_tokens)
    return replace(budget, raised_num_ctx=window) if raised else budget


async def ground(retriever: Retriever, question: str, history: list[tuple[str, str]], budget: Budget, *,
                 mode: str | None = None, instructions: str | None = None, filters: Filter | None = None,
                 params: QueryParams | None = None, patience: float | None = None) -> Grounded:
    """Retrieve the context of ``question`` within ``budget``, with ``params`` (else the settings'
    knobs with ``mode``, ``instructions`` and ``filters``). With ``patience`` (a chat turn's: the
    seconds it waits for its retrieval), a failure or a timeout is no error: it comes back as the
    ``failure``, for the chat goes on."""
    if budget.reason:
        return Grounded(budget)
    if params is None:
        params = QueryParams.from_settings(retriever.settings, mode=mode, instructions=instructions,
                                           filters=filters)
    if patience is None:
        return Grounded(budget, await retriever.retrieve(question, history, params, budget))
    try:
        with anyio.fail_after(patience):
            return Grounded(budget, await retriever.retrieve(question, history, params, budget))
    except (TimeoutError, GraphGateError, UpstreamError) as exc:
        return Grounded(budget, failure="retrieval timed out" if isinstance(exc, TimeoutError)
                        else f"retrieval failed: {exc}")
    except Exception as exc:  # noqa: BLE001 - a retrieval bug must not break the chat
        log.exception("retrieval failed")
        return Grounded(budget, failure=f"retrieval failed: {type(exc).__name__}")


def nothing_found(language_setting: str, question: str, language: str | None = None) -> str:
    """What a turn that asked for the context alone is told when there is none: in the context's
    ``language``, else the knowledge base's ``language`` setting, else the question's."""
    return wording_for(language or language_for(language_setting, question)).nothing_found
