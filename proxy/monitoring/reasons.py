"""Why a chat turn was not augmented, as a label with few values.

A trace's reason is a sentence with the model's name, token counts or an error message in it
(proxy/gateway/augment.py); a Prometheus label must take a handful of values, so each sentence is
known by how it starts.
"""

from __future__ import annotations

# (how the reason starts, its label), tried in order
REASON_PREFIXES: tuple[tuple[str, str], ...] = (
    ("background task", "background_task"),
    ("no messages", "no_messages"),
    ("malformed messages", "malformed_messages"),
    ("continuation of an assistant message", "continuation"),
    ("tool result", "tool_result"),
    ("last message is from", "not_a_user_message"),
    ("bypass mode", "bypass"),
    ("the knowledge base is empty", "empty_knowledge_base"),
    ("/api/show failed", "model_info_failed"),
    ("the conversation", "window_full"),
    ("retrieval timed out", "retrieval_timeout"),
    ("retrieval failed", "retrieval_failed"),
    ("context requested", "context_only"),
    ("no keywords", "no_keywords"),
    ("nothing relevant", "nothing_relevant"),
    ("no searchable document matches the filter", "filter_matched_nothing"),
)
MODEL_CANNOT_CHAT = "model_cannot_chat"   # "model 'x' cannot chat (capabilities: ...)"
OTHER = "other"

REASONS: tuple[str, ...] = (*(label for _, label in REASON_PREFIXES), MODEL_CANNOT_CHAT, OTHER)


def reason_label(reason: str | None) -> str:
    """The label of a skipped turn's reason; ``other`` for one this list does not know."""
    if not reason:
        return OTHER
    for prefix, label in REASON_PREFIXES:
        if reason.startswith(prefix):
            return label
    if reason.startswith("model ") and " cannot chat" in reason:
        return MODEL_CANNOT_CHAT
    return OTHER
