"""The context window a request will really run with (issue: Ollama silently cuts the start of a
prompt that does not fit, which is where the retrieved context sits)."""

from __future__ import annotations

from typing import Any

from proxy.core.settings_sections import RetrievalSettings
from proxy.retrieval.budget import MARGIN
from proxy.upstream.model_info import ModelInfo


def window_for(options: dict[str, Any] | None, info: ModelInfo, settings: RetrievalSettings,
               conversation: int, *, can_raise: bool = True) -> tuple[int, str, bool]:
    """(window, where it came from, whether GraphGate raises num_ctx to it)."""
    requested = (options or {}).get("num_ctx")
    if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
        return requested, "request", False
    window, source = (info.num_ctx, "model") if info.num_ctx else (settings.default_num_ctx, "setting")
    if settings.raise_num_ctx and can_raise:  # the OpenAI surface has no options to raise
        wanted = conversation + settings.max_total_tokens + settings.answer_reserve + MARGIN
        ceiling = info.context_length or wanted
        raised = min(wanted, ceiling)
        if raised > window:
            return raised, "raised", True
    return window, source, False
