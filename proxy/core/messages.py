"""A chat message's text, and a conversation's size in tokens: what the chat surfaces and the
budget of a retrieval both read of the messages a client sends (Ollama's, or OpenAI's, whose
content may be a list of parts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PER_MESSAGE = 4      # role markers and separators per message


def message_text(message: dict[str, Any]) -> str:
    """The text of an Ollama message or an OpenAI one (whose content may be a list of parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def conversation_tokens(messages: list[dict[str, Any]], count: Callable[[str], int]) -> int:
    tokens = 0
    for message in messages:
        tokens += PER_MESSAGE + count(message_text(message))
    return tokens
