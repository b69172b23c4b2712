"""A reply of GraphGate's own model calls as the LLM cache keeps it: made where the model is asked
(proxy/upstream/model_calls.py), stored by the knowledge store (proxy/store/protocols/cache.py)."""

from __future__ import annotations

from dataclasses import dataclass

# the kinds of reply the gateway caches, as stored
CACHE_KINDS = ("extract", "summary", "keywords", "answer")


@dataclass(frozen=True)
class CacheEntry:
    kind: str
    key: str
    model: str
    request: str
    response: str
