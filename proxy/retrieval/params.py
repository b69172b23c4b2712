"""Per-query retrieval parameters: the settings' defaults, overridable per request (/rag/query)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from proxy.core.errors import BadRequest
from proxy.core.settings import Settings

MODES = ("local", "global", "hybrid", "mix", "naive", "bypass")


@dataclass(frozen=True)
class QueryParams:
    mode: str = "mix"
    top_k: int = 40
    chunk_top_k: int = 20
    max_entity_tokens: int = 6000
    max_relation_tokens: int = 8000
    max_total_tokens: int = 30000
    cosine_threshold: float = 0.2
    related_chunks: int = 5
    chunk_selection: str = "vector"
    keywords: str = "llm"
    hl_keywords: tuple[str, ...] | None = None   # given keywords skip the extraction call
    ll_keywords: tuple[str, ...] | None = None
    instructions: str | None = None               # from the /[...] prefix
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_settings(cls, settings: Settings, **changes: Any) -> QueryParams:
        base = cls(mode=settings.mode, top_k=settings.top_k, chunk_top_k=settings.chunk_top_k,
                   max_entity_tokens=settings.max_entity_tokens, max_relation_tokens=settings.max_relation_tokens,
                   max_total_tokens=settings.max_total_tokens, cosine_threshold=settings.cosine_threshold,
                   related_chunks=settings.related_chunks, chunk_selection=settings.chunk_selection,
                   keywords=settings.keywords)
        return dataclasses.replace(base, **changes)

    def with_overrides(self, body: dict[str, Any]) -> QueryParams:
        """Apply a request's knobs, refusing bad values with a 400 that names the field."""
        changes: dict[str, Any] = {}
        for name, (kind, low, high) in _NUMERIC.items():
            if body.get(name) is not None:
                changes[name] = _number(name, body[name], kind, low, high)
        for name, options in (("mode", MODES), ("chunk_selection", ("vector", "weight")), ("keywords", ("llm", "off"))):
            if body.get(name) is not None:
                if body[name] not in options:
                    raise BadRequest(f"{name} must be one of {', '.join(options)}")
                changes[name] = body[name]
        for name in ("hl_keywords", "ll_keywords"):
            if body.get(name) is not None:
                value = body[name]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise BadRequest(f"{name} must be a list of strings")
                changes[name] = tuple(v.strip() for v in value if v.strip())
        return dataclasses.replace(self, **changes)


_NUMERIC: dict[str, tuple[type, float, float]] = {
    "top_k": (int, 1, 1000), "chunk_top_k": (int, 1, 1000), "max_entity_tokens": (int, 0, 1_000_000),
    "max_relation_tokens": (int, 0, 1_000_000), "max_total_tokens": (int, 100, 10_000_000),
    "cosine_threshold": (float, 0, 1), "related_chunks": (int, 1, 100),
}


def _number(name: str, value: Any, kind: type, low: float, high: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise BadRequest(f"{name} must be {'a whole number' if kind is int else 'a number'}")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low:g} and {high:g}")
    return kind(value)
