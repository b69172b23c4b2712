"""A BM25 keyword index (bm25s) over one table's texts, kept in step with the store's commits.

bm25s indexes are static: a sparse matrix of precomputed per-word scores, built in one go (about
12 s for 100k chunks of 150 words on the bench machine) and searched in well under a millisecond.
So the index is two parts:

- the main part, a bm25s index built from every text at its last rebuild, with a mask of the keys
  removed since (their scores are zeroed; their words still count in its statistics until the next
  rebuild);
- the recent part, the texts added since, held as word counts and scored here by the same formula
  (bm25s' default, Lucene's BM25) with the statistics of both parts together, so a new document's
  rare identifier scores like an old one's.

When the recent additions and removals outgrow ``REBUILD_MIN`` and ``REBUILD_SHARE`` of the main
part, the store rebuilds the whole index from the tables (``needs_rebuild``): the cost of a rebuild
is spread over that many changed rows. Only the main part is saved (with its keys and the removed
ones, tagged with the generation); at start-up the store reads the recent texts back from the
tables by comparing key sets, as it heals the vector indexes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import Counter
from pathlib import Path

import bm25s
import numpy as np

from proxy.text.words import terms

K1, B = 1.5, 0.75          # bm25s' defaults (method "lucene")
# an entity's description is its notes merged from every mention: its length says how much the
# documents tell about it, not how wordy one text is, so a hub's description is not discounted for
# it (with 0.75, "which printing companies ...?" found the printing hubs past the 40th entity; with 0
# every gold company of the shapes bench's no-entity questions is in the first 40)
ENTITY_B = 0.0
# how texts are cut into terms (``proxy.text.words.terms``); a main part saved under another is rebuilt
TERMS_VERSION = 2          # 1: bm25s' tokenizer (English words only); 2: every script, folded
REBUILD_MIN = 2_000        # changed rows held outside the main part before a rebuild pays off
REBUILD_SHARE = 0.1        # ... or this share of the main part, whichever is larger
MAIN, STATE = "main", "state.json"


def words(texts: list[str]) -> list[list[str]]:
    """Each text's terms: words of two or more letters or digits and bigrams of scripts written
    without spaces, folded, stopwords left out ("ERR-4711" is "err" and "4711")."""
    return [terms(text) for text in texts]


def idf(documents: int, frequency: int) -> float:
    return math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5))


class Bm25Index:
    def __init__(self, path: Path, b: float = B) -> None:
        self.path = path   # a folder beside the .usearch files, e.g. chunks.bm25/
        self.b = b         # BM25's length normalisation (``ENTITY_B`` for the entities' descriptions)
        self.generation = -1
        self._main: bm25s.BM25 | None = None
        self._main_keys = np.empty(0, dtype=np.uint64)
        self._position: dict[int, int] = {}
        self._removed = np.zeros(0, dtype=bool)
        self._removed_count = 0
        self._main_length = 0          # total words in the main part (for the average length)
        self._main_saved = True
        self._recent: dict[int, Counter[str]] = {}
        self._recent_postings: dict[str, dict[int, int]] = {}
        self._recent_length = 0
        self._recent_sizes: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._main_keys) - self._removed_count + len(self._recent)

    def keys(self) -> np.ndarray:
        main = self._main_keys[~self._removed]
        recent = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
        return np.concatenate([main, recent])

    # --- changes ---

    def add(self, keys: list[int], texts: list[str]) -> None:
        new = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in self._position and k not in self._recent]
        for (key, _), doc in zip(new, words([t for _, t in new]), strict=True):
            counts = Counter(doc)
            self._recent[key] = counts
            self._recent_sizes[key] = len(doc)
            self._recent_length += len(doc)
            for word, tf in counts.items():
                self._recent_postings.setdefault(word, {})[key] = tf

    def remove(self, keys: list[int]) -> None:
        for key in keys:
            counts = self._recent.pop(key, None)
            if counts is not None:
                self._recent_length -= self._recent_sizes.pop(key)
                for word in counts:
                    postings = self._recent_postings[word]
                    del postings[key]
                    if not postings:
                        del self._recent_postings[word]
                continue
            position = self._position.get(key)
            if position is not None and not self._removed[position]:
                self._removed[position] = True
                self._removed_count += 1

    def needs_rebuild(self) -> bool:
        changed = len(self._recent) + self._removed_count
        return changed > max(REBUILD_MIN, REBUILD_SHARE * len(self._main_keys))

    def rebuild(self, keys: list[int], texts: list[str]) -> None:
        docs = words(texts)
        main = None
        if any(docs):   # bm25s cannot index a corpus without a single word
            main = bm25s.BM25(k1=K1, b=self.b)
            main.index(docs, show_progress=False)
        self._set_main(main, np.asarray(keys, dtype=np.uint64), np.zeros(len(keys), dtype=bool),
                       sum(len(d) for d in docs))
        self._forget_recent()
        self._main_saved = False

    def _set_main(self, main: bm25s.BM25 | None, keys: np.ndarray, removed: np.ndarray, length: int) -> None:
        self._main, self._main_keys, self._removed = main, keys, removed
        self._position = {int(k): i for i, k in enumerate(keys.tolist())}
        self._removed_count = int(removed.sum())
        self._main_length = length

    def _forget_recent(self) -> None:
        self._recent, self._recent_postings, self._recent_sizes, self._recent_length = {}, {}, {}, 0

    # --- searching ---

    def search(self, query: str, count: int) -> list[tuple[int, float]]:
        terms = list(dict.fromkeys(words([query])[0]))
        if not terms or count <= 0:
            return []
        found = self._search_main(terms, count) + self._search_recent(terms)
        found.sort(key=lambda hit: -hit[1])
        return found[:count]

    def _search_main(self, terms: list[str], count: int) -> list[tuple[int, float]]:
        main = self._main
        known = [t for t in terms if t in main.vocab_dict] if main is not None else []
        if main is None or not known:
            return []
        scores = main.get_scores(known)
        scores[self._removed] = 0.0
        hits = np.flatnonzero(scores > 0)
        if len(hits) > count:
            hits = hits[np.argpartition(-scores[hits], count - 1)[:count]]
        return [(int(self._main_keys[i]), float(scores[i])) for i in hits]

    def _main_frequency(self, term: str) -> int:
        if self._main is None or term not in self._main.vocab_dict:
            return 0
        word = self._main.vocab_dict[term]
        indptr = self._main.scores["indptr"]
        return int(indptr[word + 1] - indptr[word])

    def _search_recent(self, terms: list[str]) -> list[tuple[int, float]]:
        """The recent texts scored with both parts' statistics (a word's documents, the average length)."""
        if not self._recent:
            return []
        documents = len(self._main_keys) + len(self._recent)
        average = max((self._main_length + self._recent_length) / documents, 1.0)
        scores: dict[int, float] = {}
        for term in terms:
            postings = self._recent_postings.get(term)
            if not postings:
                continue
            weight = idf(documents, self._main_frequency(term) + len(postings))
            for key, tf in postings.items():
                length = self._recent_sizes[key]
                scores[key] = scores.get(key, 0.0) + weight * tf / (tf + K1 * (1 - self.b + self.b * length / average))
        return list(scores.items())

    # --- on disk ---

    def load(self) -> bool:
        """The saved main part and the keys removed from it; the recent texts are not saved (the
        store reads them back from the tables). False when nothing usable is saved."""
        self.generation = -1
        try:
            state = json.loads((self.path / STATE).read_text())
            main_dir = self.path / MAIN
            keys = np.load(main_dir / "keys.npy")
            built = (main_dir / "params.index.json").exists()   # none for texts without a single word
            main = bm25s.BM25.load(str(main_dir), show_progress=False) if built else None
            removed = np.isin(keys, np.asarray(state["removed"], dtype=np.uint64))
            length, generation = int(state["length"]), int(state["generation"])
            if state.get("terms") != TERMS_VERSION or (main is not None and main.b != self.b):
                return False   # cut or weighed otherwise: built again
        except (OSError, ValueError, KeyError, TypeError):
            return False
        self._set_main(main, keys.astype(np.uint64), removed, length)
        self._forget_recent()
        self._main_saved, self.generation = True, generation
        return True

    def save(self, generation: int) -> None:
        """The main part when it was rebuilt since the last save, then the state (removed keys,
        generation); each replaced whole, so a crash leaves a copy the next start can heal."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if not self._main_saved:
                self._save_main()
            state = {"generation": generation, "length": self._main_length, "terms": TERMS_VERSION,
                     "removed": self._main_keys[self._removed].tolist()}
            tmp = self.path / f"{STATE}.tmp"
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.path / STATE)
        except OSError as exc:
            raise OSError(f"could not save {self.path.name}: {exc}") from exc
        self.generation = generation

    def _save_main(self) -> None:
        tmp, final = self.path / f"{MAIN}.tmp", self.path / MAIN
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            if self._main is not None:
                self._main.save(str(tmp), show_progress=False)
            np.save(tmp / "keys.npy", self._main_keys)
            (self.path / STATE).unlink(missing_ok=True)   # no state for a main part it does not describe
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._main_saved = True
