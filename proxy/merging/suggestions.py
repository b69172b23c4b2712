"""Merge suggestions: pairs of entities that are probably the same thing.

Two signals: the names agree once punctuation, case, articles and company suffixes are dropped
("ACME Corp." / "Acme Corporation"), or the entities' embeddings (name + description) are close
in the entity index. Embedding neighbours are looked up for the best-connected entities only
(``EMBEDDING_PROBES``): a duplicate that matters is usually well connected, and a probe per
entity of a 100k-entity graph would take seconds. The result is cached per store generation; on
a big graph (a computation takes seconds at 100k entities) the last result is served after a
commit while a fresh one is computed in the background.
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass

import numpy as np

from proxy.core.names import normalised
from proxy.store.changes import pair_key
from proxy.store.store import KnowledgeStore

EMBEDDING_PROBES = 2000
SYNC_LIMIT = 20_000     # entities up to which a stale result is recomputed at once (well under a second)
PROBES_PER_LOCK = 250   # probes searched per hold of the store's memory lock (retrieval waits on it)
NEIGHBOURS = 5
# a similar-looking name lowers the embedding similarity needed
NAME_SIMILAR = 0.85
NAME_BONUS = 0.1

@dataclass(frozen=True)
class Suggestion:
    a: str            # entity keys, sorted
    b: str
    score: float
    reason: str       # "same name" | "similar meaning" | "similar name and meaning"

    @property
    def pair(self) -> str:
        return pair_key(self.a, self.b)


class SuggestionFinder:
    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store
        self._lock = threading.Lock()         # one computation at a time
        self._cached: tuple[tuple[int, float], list[Suggestion]] | None = None
        self._refreshing = False
        self._normalised: dict[str, str] = {}  # name -> normalised, kept across generations

    def find(self, threshold: float) -> list[Suggestion]:
        """All current suggestions, best first (blocking: run it in a worker thread)."""
        stamp = (self.store.generation, threshold)
        cached = self._cached
        big = self.store.entity_count_sync() > SYNC_LIMIT
        if big and cached is not None and cached[0] != stamp and cached[0][1] == threshold:
            self.refresh_in_background(threshold)  # serve the last result meanwhile
        elif cached is None or cached[0] != stamp:
            cached = self._refresh(threshold)
        hidden = self.store.tables.graph_rows.dismissed_sync()
        return [s for s in cached[1] if s.pair not in hidden]

    def _refresh(self, threshold: float) -> tuple[tuple[int, float], list[Suggestion]]:
        with self._lock:
            stamp = (self.store.generation, threshold)
            if self._cached is None or self._cached[0] != stamp:
                self._cached = (stamp, self._compute(threshold))
            return self._cached

    def refresh_in_background(self, threshold: float) -> None:
        if self._refreshing:
            return
        self._refreshing = True

        def run() -> None:
            try:
                self._refresh(threshold)
            finally:
                self._refreshing = False

        threading.Thread(target=run, name="merge-suggestions", daemon=True).start()

    def _core(self, name: str) -> str:
        core = self._normalised.get(name)
        if core is None:
            if len(self._normalised) > 1_000_000:
                self._normalised.clear()
            core = self._normalised[name] = normalised(name)
        return core

    def _compute(self, threshold: float) -> list[Suggestion]:
        names, by_vector = self.store.entity_names_sync()
        found: dict[str, Suggestion] = {}
        groups: dict[str, list[str]] = {}
        for key, name in names.items():
            core = self._core(name)
            if core:
                groups.setdefault(core, []).append(key)
        for members in groups.values():
            members.sort()
            for i, a in enumerate(members):
                for b in members[i + 1:i + 6]:  # a big group of namesakes: neighbours only
                    found[pair_key(a, b)] = Suggestion(a, b, 1.0, "same name")
        for a, b, similarity in self._embedding_pairs(by_vector):
            if pair_key(a, b) in found or a not in names or b not in names:
                continue
            if similarity >= threshold:
                found[pair_key(a, b)] = Suggestion(min(a, b), max(a, b), round(similarity, 4), "similar meaning")
            elif similarity >= threshold - NAME_BONUS:  # only then is the name comparison worth its cost
                ratio = difflib.SequenceMatcher(None, self._core(names[a]), self._core(names[b])).ratio()
                if ratio >= NAME_SIMILAR:
                    found[pair_key(a, b)] = Suggestion(min(a, b), max(a, b), round(similarity, 4),
                                                       "similar name and meaning")
        return sorted(found.values(), key=lambda s: (-s.score, s.a, s.b))

    def _embedding_pairs(self, by_vector: dict[int, str]) -> list[tuple[str, str, float]]:
        wanted, keys = self.store.best_connected_sync(EMBEDDING_PROBES)
        vector_keys = np.asarray(keys, dtype=np.uint64)
        pairs = []
        for start in range(0, len(wanted), PROBES_PER_LOCK):  # in slices: a chat's retrieval never waits long
            probes_here, vectors = self._stored_vectors(wanted[start:start + PROBES_PER_LOCK],
                                                        vector_keys[start:start + PROBES_PER_LOCK])
            if not probes_here:
                continue
            found_keys, similarities = self.store.search_many_sync("entities", vectors, NEIGHBOURS + 1)
            for row, key in enumerate(probes_here):
                for found, similarity in zip(found_keys[row], similarities[row], strict=True):
                    other = by_vector.get(int(found))
                    if other is None or other == key:
                        continue
                    pairs.append((key, other, float(similarity)))
        return pairs

    def _stored_vectors(self, probes: list[str], keys: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The probes whose vectors the index still holds, and those vectors (a commit since the
        probes were picked may have removed or re-keyed some)."""
        vectors = self.store.vectors_sync("entities", [int(k) for k in keys])
        if len(vectors) == len(keys):
            return probes, vectors
        kept, rows = [], []
        for probe, key in zip(probes, keys, strict=True):
            one = self.store.vectors_sync("entities", [int(key)])
            if len(one):
                kept.append(probe)
                rows.append(one[0])
        return kept, (np.vstack(rows) if rows else np.empty((0, 0), dtype=np.float32))
