"""How much context a retrieval may give: one plan for every surface (a chat turn, ``/rag/query``
and the playground, the MCP ``query`` tool, ``graphgate query``).

``max_total_tokens`` is a ceiling on the whole context. A model's window (or a request's
``num_ctx``) lowers it to what the conversation and a reserve for the answer leave: Ollama
silently drops the *beginning* of a prompt that does not fit its ``num_ctx``, which is exactly
where the retrieved context sits. The section ceilings (``max_entity_tokens``,
``max_relation_tokens``) are scaled with the total, and together never take more than
``GRAPH_SHARE`` of it, so that a small total still leaves room for the passages that carry the
references. The context builders (``context.py``) then hold the text itself to the total.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import anyio

from proxy.core.messages import conversation_tokens, message_text

if TYPE_CHECKING:
    from proxy.core.tokens import Tokenizer

LOOP_TOKENISING_CHARS = 16_384   # more than this to tokenise (~2 ms) goes to a worker thread

MARGIN = 64          # chat-template tokens the tokenizer does not see
# the entity and relation sections together take at most this share of the total: the defaults
# (6,000 + 8,000 of 30,000) stay under it, and a total set below the sections' ceilings (1,000,
# say) is not spent on the graph alone
GRAPH_SHARE = 0.5


@dataclass(frozen=True)
class Budget:
    window: int
    window_source: str          # "request", "model" or "setting"
    conversation: int           # tokens of what the client sends (system prompt, history, question)
    reserve: int                # kept for the answer
    available: int              # what is left for our context (may be <= 0)
    total: int                  # the context budget actually used: min(available, max_total)
    entity: int
    relation: int
    raised_num_ctx: int | None = None
    reason: str | None = None   # why nothing can be injected, when that is the case

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_budget(*, max_total: int, max_entity: int, max_relation: int, window: int | None = None,
                source: str = "none", conversation: int = 0, reserve: int = 0) -> Budget:
    """The context budget of a retrieval. Without ``window`` (no model window to fit: ``/rag/query``
    without ``num_ctx``) the total is ``max_total``; with one, what the window leaves, at most
    ``max_total``."""
    if window is None:
        window, available = 0, max_total
    else:
        available = window - conversation - reserve - MARGIN
        if available <= 0:
            return Budget(window, source, conversation, reserve, available, 0, 0, 0,
                          reason=f"the conversation ({conversation} tokens) and the answer reserve ({reserve}) leave "
                                 f"no room in the {window}-token window")
    total = min(available, max_total)
    entity, relation = section_budgets(total, max_total=max_total, max_entity=max_entity, max_relation=max_relation)
    return Budget(window, source, conversation, reserve, available, total, entity, relation)


def section_budgets(total: int, *, max_total: int, max_entity: int, max_relation: int) -> tuple[int, int]:
    """The entity and relation sections' budgets within ``total``: their ceilings scaled as the
    total is to ``max_total``, then, if they still take more than ``GRAPH_SHARE`` of the total,
    scaled down together (each keeps its share of the two)."""
    scale = total / max_total if max_total > 0 else 0.0
    entity, relation = max_entity * scale, max_relation * scale
    graph = entity + relation
    if graph > total * GRAPH_SHARE:
        shrink = total * GRAPH_SHARE / graph
        entity, relation = entity * shrink, relation * shrink
    return int(entity), int(relation)


async def conversation_size(messages: list[dict[str, Any]], tokenizer: Tokenizer) -> int:
    """``conversation_tokens``, off the event loop when much of it was not counted lately: a pasted
    document of 210 KB takes ~23 ms to tokenise, and every stream the loop relays would wait."""
    if tokenizer.uncounted_chars(message_text(m) for m in messages) <= LOOP_TOKENISING_CHARS:
        return conversation_tokens(messages, tokenizer.count)
    return await anyio.to_thread.run_sync(conversation_tokens, messages, tokenizer.count)
