"""Ranking and selection rules, as small pure functions over plain lists."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

from proxy.text.words import stems, strong, without_names

T = TypeVar("T")

MORPHEME_MATCH = 0.5   # a keyword met by a character the words share elsewhere than first: 就职 ~ 任职 (post),
                       # but also 制造商 ~ 供应商 (-er) and 总部 ~ 零部件 (部: head office, parts); counted
                       # once per relation, so two stray characters never weigh as one keyword met


def round_robin(lists: Sequence[Sequence[T]], key: Callable[[T], Hashable]) -> list[T]:
    """Interleave the lists (first of each, then second of each...), keeping the first of duplicates."""
    seen: set[Hashable] = set()
    merged: list[T] = []
    for i in range(max((len(items) for items in lists), default=0)):
        for items in lists:
            if i < len(items) and key(items[i]) not in seen:
                seen.add(key(items[i]))
                merged.append(items[i])
    return merged


def scored(matches: list[tuple[int, float]], rows: dict[int, Any]) -> list[Any]:
    """The rows of the vector matches, in match order, each with its similarity."""
    found = []
    for key, score in matches:
        if key in rows:
            rows[key].score = score
            found.append(rows[key])
    return found


def rank_relations(items: list[T], degree: Callable[[T], int], weight: Callable[[T], float]) -> list[T]:
    """Most central first (endpoint degrees summed), then heaviest; stable otherwise."""
    return sorted(items, key=lambda r: (-degree(r), -weight(r)))


def word_stems(text: str) -> frozenset[str]:
    """The words a question's relation words meet a relation's by, in any script (``proxy.text.words.stems``)."""
    return stems(text)


def keyword_match(stems: frozenset[str], keywords: Sequence[str]) -> float:
    """The share of a relation's keywords one of whose words the question has (``word_stems``); the
    keywords met only by a character elsewhere in a word count as half of one, however many."""
    if not keywords:
        return 0.0
    return _keyword_share(stems, tuple(keywords))


@functools.lru_cache(maxsize=16384)   # a turn judges hundreds of edges, most of a few kinds' keywords
def _keyword_share(stems: frozenset[str], keywords: tuple[str, ...]) -> float:
    matched = [word_stems(keyword) & stems for keyword in keywords]
    full = sum(1 for shared in matched if strong(shared))
    weak = MORPHEME_MATCH if any(shared and not strong(shared) for shared in matched) else 0.0
    return (full + weak) / len(keywords)


def relation_match(asked: frozenset[str], keywords: Sequence[str], description: str, names: Sequence[str]) -> float:
    """How well a relation answers the question's relation words (``asked``: their stems, the
    names the question writes cut out, ``word_forms.relation_words``): the share of its keywords
    they match, plus the share of them its description holds less the words of the relation's
    own entity names (0 to 2)."""
    if not asked:
        return 0.0
    described = described_stems(description, tuple(names))
    return keyword_match(asked, keywords) + len(asked & described) / len(asked)


@functools.lru_cache(maxsize=8192)   # a relation is judged in every turn that finds it, several times an evidence order
def described_stems(description: str, names: tuple[str, ...]) -> frozenset[str]:
    """The stems of a relation's description less those of its entities' ``names``: what it says
    of their relation, not who it joins."""
    return without_names(word_stems(description), names)


def weighted_quota(sources: Sequence[Sequence[str]], per_item: int) -> list[str]:
    """LightRAG's WEIGHT polling: the first item gets ``per_item`` chunks, the quota falls linearly to
    one for the last; chunks shared by several items come first within each item's list."""
    shared = Counter(chunk for chunk_ids in sources for chunk in dict.fromkeys(chunk_ids))
    count = len(sources)
    picked: dict[str, None] = {}
    for rank, chunk_ids in enumerate(sources):
        quota = per_item if count == 1 else max(1, round(per_item - (per_item - 1) * rank / (count - 1)))
        ordered = sorted(dict.fromkeys(chunk_ids), key=lambda c: -shared[c])
        for chunk in [c for c in ordered if c not in picked][:quota]:
            picked[chunk] = None
    return list(picked)


def by_similarity(sources: Sequence[Sequence[str]], per_item: int, similarity: dict[str, float]) -> list[str]:
    """VECTOR selection: each item's own chunks most similar to the query, items in rank order."""
    picked: dict[str, None] = {}
    for chunk_ids in sources:
        candidates = sorted((c for c in dict.fromkeys(chunk_ids) if c in similarity and c not in picked),
                            key=lambda c: -similarity[c])
        for chunk in candidates[:per_item]:
            picked[chunk] = None
    return list(picked)


def cosine_to(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    if vectors.size == 0:
        return np.empty(0, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(query) or 1.0)
    return (vectors @ query) / np.where(norms == 0, 1.0, norms)

