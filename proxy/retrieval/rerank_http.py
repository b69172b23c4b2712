"""The optional re-ranking stage over HTTP: the fused chunks sent to a re-ranking server in the
``/v1/rerank`` shape that llama.cpp's server, vLLM, Hugging Face TEI and Infinity serve,

    request   {"model", "query", "documents": [text, ...], "top_n"}
    response  {"results": [{"index", "relevance_score"}, ...]}

and the chunks put in the order of its scores. The call goes through the upstream boundary
(``Upstream.sibling``), bounded by GRAPHGATE_RERANK_TIMEOUT in all. A server that is down, slow or
answers anything else raises an ``UpstreamError`` naming why; the retriever then keeps the fused
order and says so in the retrieval's trace.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any
from urllib.parse import urlsplit

from proxy.core.errors import UpstreamError, UpstreamStatusError
from proxy.core.settings_sections import RetrievalSettings
from proxy.retrieval.found import FoundChunk
from proxy.retrieval.stages import Question
from proxy.upstream.client import Upstream, json_kind

DEFAULT_PATH = "/v1/rerank"


def rerank_endpoint(url: str) -> tuple[str, str]:
    """(server, path) of GRAPHGATE_RERANK_URL: a URL whose path ends in ``rerank`` names the endpoint
    itself (Infinity's and TEI's ``/rerank``); an OpenAI-style base ending in ``/v1`` gets ``/rerank``;
    any other base URL gets ``/v1/rerank``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("rerank"):
        path += "/rerank" if path.endswith("/v1") else DEFAULT_PATH
    return f"{parts.scheme}://{parts.netloc}", path


class HttpReranker:
    """A ``Reranker`` (proxy/retrieval/stages.py) asking a re-ranking server."""

    def __init__(self, server: Upstream, path: str, *, model: str | None, timeout: float, top_n: int) -> None:
        self.server = server
        self.path = path
        self.model = model
        self.timeout = timeout
        self.top_n = top_n  # chunks kept, best first; 0: all

    @classmethod
    def from_settings(cls, settings: RetrievalSettings, upstream: Upstream) -> HttpReranker | None:
        """The reranker GRAPHGATE_RERANK_URL names, or None when it is unset (no re-ranking)."""
        if settings.rerank_url is None:
            return None
        base, path = rerank_endpoint(settings.rerank_url)
        return cls(upstream.sibling(base, "re-ranking server"), path, model=settings.rerank_model,
                   timeout=settings.rerank_timeout, top_n=settings.rerank_top_n)

    async def aclose(self) -> None:
        await self.server.aclose()

    async def rerank(self, question: Question, chunks: list[FoundChunk]) -> list[FoundChunk]:
        """The chunks by the server's scores (each with its ``rerank_score``), at most ``top_n``;
        chunks the server left unscored follow in the fused order when fewer came back."""
        if not chunks:
            return chunks
        keep = min(self.top_n, len(chunks)) if self.top_n else len(chunks)
        body: dict[str, Any] = {"query": question.text, "documents": [c.content for c in chunks], "top_n": keep}
        if self.model is not None:
            body["model"] = self.model
        try:
            reply = await self.server.call_json("POST", self.path, body, deadline=self.timeout)
        except UpstreamStatusError as exc:  # its message is the server's own: say whose
            raise UpstreamStatusError(f"{self.server.name} at {self.server.url} answered HTTP {exc.status}: "
                                      f"{exc.message}", status=exc.status) from exc
        scores = self.scores(reply, len(chunks))
        ranked = sorted(scores, key=lambda index: (-scores[index], index))  # ties keep the fused order
        unscored = [index for index in range(len(chunks)) if index not in scores]
        return [dataclasses.replace(chunks[index], rerank_score=scores.get(index))
                for index in [*ranked, *unscored][:keep]]

    def scores(self, reply: dict[str, Any], count: int) -> dict[int, float]:
        """{document index: relevance score} of a reply, or the shape error naming what is wrong."""
        results = reply.get("results")
        if not isinstance(results, list) or not results:
            raise self.wrong(f"its results are {json_kind(results)}, not a list of scores")
        scores: dict[int, float] = {}
        for result in results:
            if not isinstance(result, dict):
                raise self.wrong(f"a result is {json_kind(result)}, not an object")
            index, score = result.get("index"), result.get("relevance_score")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise self.wrong(f"a result's index is {json_kind(index)}, not one of the {count} documents")
            if index in scores:
                raise self.wrong(f"document {index} is scored twice")
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise self.wrong(f"a result's relevance_score is {json_kind(score)}, not a number")
            scores[index] = float(score)
        return scores

    def wrong(self, detail: str) -> UpstreamError:
        return self.server.wrong_shape(self.path, detail)
