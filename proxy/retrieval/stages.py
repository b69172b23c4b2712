"""The stages of a retrieval and what passes between them.

    channels  each searches one index for the question (blocking: a worker thread per stage)
    fusion    the channels' entities and relations merged (round-robin, or by reciprocal rank:
              the ``fusion`` knob), then every chunk list (the channels' and the chosen graph
              items' sources) merged likewise
    rerank    optional, async: reorders the fused chunks (``Retriever.reranker``); one that
              fails with an UpstreamError leaves the fused order
    context   the token-budgeted text given to the model

A channel is one file in proxy/retrieval/channels/ and one line in its registry there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from proxy.retrieval.found import Found, FoundChunk
from proxy.retrieval.params import QueryParams

if TYPE_CHECKING:
    from proxy.retrieval.scope import Scope
    from proxy.store.protocols.retrieval import RetrievalReads

KEYWORD_VECTORS = ("low", "high")  # the vectors of the extracted keywords; "query" is the question's own


@dataclass(frozen=True)
class Question:
    """What every stage sees: the question, its parameters and its embeddings."""
    text: str
    params: QueryParams
    vectors: dict[str, np.ndarray]   # "query", and "low" / "high" when there are keywords
    turns: tuple[str, ...] = ()       # the recent user turns before it, oldest first
    themes: tuple[str, ...] = ()      # the high-level keywords, when the keyword call gave them in time
    scope: Scope | None = None        # what a metadata filter lets the retrieval see (None: everything)
    # what one channel worked out that others need too (the entities it names: ``linked_keys``)
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def asked(self) -> str:
        """What the question asks about in words: its text and its themes."""
        return " ".join((self.text, *self.themes))


class Channel(Protocol):
    name: str
    vector: str   # which of the question's vectors it searches with: "low", "high" or "query"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        """The channel's finds, best first. Blocking: called in a worker thread."""
        ...


@runtime_checkable
class Switched(Protocol):
    """A channel that runs only when the query's parameters turn it on (a knob)."""
    def enabled(self, params: QueryParams) -> bool: ...


class Reranker(Protocol):
    async def rerank(self, question: Question, chunks: list[FoundChunk]) -> list[FoundChunk]:
        """``chunks`` (fused, with their texts) in a new order; it may drop some, never add any.
        An UpstreamError says it could not (the retriever keeps the fused order, saying why)."""
        ...
