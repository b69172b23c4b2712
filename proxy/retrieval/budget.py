"""How much context a turn can take: the model's real window, minus the conversation and a reserve
for the answer, scaled down from the configured ceilings.

Ollama silently drops the *beginning* of a prompt that does not fit its ``num_ctx``, which is
exactly where the retrieved context sits; so the context must fit the window, not the ceilings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MARGIN = 64          # chat-template tokens the tokenizer does not see
PER_MESSAGE = 4      # role markers and separators per message


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


def plan_budget(*, window: int, source: str, conversation: int, reserve: int, max_total: int, max_entity: int,
                max_relation: int) -> Budget:
    available = window - conversation - reserve - MARGIN
    if available <= 0:
        return Budget(window, source, conversation, reserve, available, 0, 0, 0,
                      reason=f"the conversation ({conversation} tokens) and the answer reserve ({reserve}) leave no "
                             f"room in the {window}-token window")
    total = min(available, max_total)
    scale = total / max_total
    return Budget(window, source, conversation, reserve, available, total,
                  int(max_entity * scale), int(max_relation * scale))


def conversation_tokens(messages: list[dict[str, Any]], count: Any) -> int:
    tokens = 0
    for message in messages:
        tokens += PER_MESSAGE + count(message_text(message))
    return tokens


def message_text(message: dict[str, Any]) -> str:
    """The text of an Ollama message or an OpenAI one (whose content may be a list of parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""
