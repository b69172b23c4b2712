"""A character-bigram hashing embedder: the fake upstream's lexical embedding made fair to scripts
written without spaces. tests/fake_ollama.py hashes whole words, so an unspaced Chinese clause is
one "word" and shares nothing with a question that names the same entity; here every overlapping
pair of characters of a run of letters (after NFKC folding and case folding) adds +-1 to a hashed
dimension, and so does each whole word of a spaced script. A run of one character counts as itself.
Runs are cut where the script changes from spaced to unspaced ("Systems的总部": "systems" and "的总部"),
and pairs never span a space or punctuation. English and Chinese texts are then embedded by one rule,
as issue 31's held-out measurement did ("the same character-bigram hashing embedder for both").
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from typing import Any

import numpy as np

from tests.fake_ollama import FakeOllama

DIMENSION = 256   # the hashing embedder's (bench/multihop_recall.py)
# scripts written without spaces between words: CJK, kana, Hangul syllables, Thai, Lao, Myanmar, Khmer
UNSPACED = "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
RUNS = re.compile(rf"[{UNSPACED}]+|[^\W{UNSPACED}]+")
UNSPACED_RUN = re.compile(rf"[{UNSPACED}]")


def features(text: str) -> list[str]:
    """The hashed features of ``text``: character pairs of every run, and the words of spaced runs."""
    found: list[str] = []
    for run in RUNS.findall(unicodedata.normalize("NFKC", text).casefold()):
        if len(run) == 1:
            found.append(run)
            continue
        found.extend(run[i:i + 2] for i in range(len(run) - 1))
        if not UNSPACED_RUN.match(run):
            found.append(" " + run)   # a whole word; the space keeps it apart from a pair of the same letters
    return found


@functools.lru_cache(maxsize=400_000)
def _hash(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


def bigram_embedding(text: str, dim: int = DIMENSION) -> list[float]:
    """A unit vector; a small constant part keeps a text without letters away from zero, as the fake's does."""
    vec = np.full(dim, 0.1 / math.sqrt(dim))
    hashes = [_hash(f) for f in features(text)]
    if hashes:
        np.add.at(vec, [h % dim for h in hashes], [1.0 if (h >> 32) & 1 else -1.0 for h in hashes])
    return (vec / np.linalg.norm(vec)).tolist()


class BigramUpstream(FakeOllama):
    """The fake upstream with the character-bigram embedder as its embedding model."""

    def __init__(self, dim: int = DIMENSION) -> None:
        super().__init__(embed_dim=dim)

    def _vectors(self, name: str, texts: list[str], dimensions: Any = None) -> list[list[float]]:
        return [bigram_embedding(t, self.embed_dim) for t in texts]
