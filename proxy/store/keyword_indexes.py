"""The store's keyword (BM25) indexes, one per indexed table (chunks, entities, relations): loaded
and healed at start-up when saved, else built on a table's first use (12 s at 100k chunks, and
keyword search is off by default), then kept in step with every commit; rebuilt in a thread of
their own when a commit's changes call for it. The store (``store.py``) owns one ``KeywordIndexes``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from proxy.store.changes import Changeset, IndexDelta, split_pair
from proxy.store.keywords_bm25 import ENTITY_B, B
from proxy.store.sql_commit import INDEXED_TABLES

if TYPE_CHECKING:
    from proxy.store.backends import Backend
    from proxy.store.memory_reads import NamedRelation
    from proxy.store.protocols.keywords import KeywordIndex
    from proxy.store.protocols.tables import Tables
    from proxy.store.rows_memory import EntityMeta

log = logging.getLogger("graphgate.store")


class KeywordSource(Protocol):
    """What the indexes read of their store: its tables, its generation, its rows by vector key."""

    tables: Tables
    generation: int

    def chunk_ids_sync(self, keys: list[int]) -> dict[int, str]: ...

    def entity_rows_sync(self, keys: list[int]) -> dict[int, EntityMeta]: ...

    def relation_rows_sync(self, keys: list[int]) -> dict[int, NamedRelation]: ...


class KeywordIndexes:
    def __init__(self, store: KeywordSource, backend: Backend, data_dir: Path) -> None:
        self._store, self._backend, self._data_dir = store, backend, data_dir
        self._indexes: dict[str, KeywordIndex] = {
            name: backend.new_keywords(data_dir / f"{name}.bm25", keyword_b(name)) for name in INDEXED_TABLES}
        self.ready: set[str] = set()   # the tables whose keyword index is in use (built on first use)
        self._generation = 0
        self._lock = threading.RLock()
        self._rebuilds: dict[str, threading.Thread] = {}   # by table: at most one at a time

    def search_sync(self, table: str, query: str, count: int) -> list[tuple[int, float]]:
        """(vector key, BM25 score) of the ``count`` rows of ``table`` whose text best matches
        ``query``'s words, best first (only rows sharing a word). A table's index is built on its
        first use (the entities' alone for a question that names none: the chunks' costs far more).
        Blocking."""
        with self._lock:
            if table not in self.ready:
                self.build(heal=False, tables={table})
                self.save_quietly()
            return self._indexes[table].search(query, count)

    def count(self, table: str) -> int:
        """How many rows ``table``'s keyword index holds (0 until it is first used)."""
        with self._lock:
            return len(self._indexes[table]) if table in self.ready else 0

    def open(self) -> None:
        """Saved keyword indexes (keyword search was used on this store) are loaded and healed."""
        loaded = {table for table, index in self._indexes.items() if index.load()}
        if loaded:
            self.build(heal=True, tables=loaded)

    def build(self, *, heal: bool, tables: set[str]) -> None:
        """The keyword indexes of ``tables`` made to hold exactly the tables' keys: healed by comparing
        key sets (a saved copy: the texts added since its last rebuild are read back), or built anew."""
        with self._lock:
            for table in tables:
                index = self._indexes[table]
                db_keys = self._store.tables.keys_sync(table)
                if not heal:
                    index.rebuild(*self._texts(table, db_keys.tolist()))
                    continue
                ix_keys = index.keys()
                missing = np.setdiff1d(db_keys, ix_keys).tolist()
                extra = np.setdiff1d(ix_keys, db_keys).tolist()
                index.remove(extra)
                index.add(*self._texts(table, missing))
                if index.needs_rebuild():
                    index.rebuild(*self._texts(table, db_keys.tolist()))
                if index.generation != self._store.generation or extra:
                    log.info("keyword index %s was out of step with the tables and has been repaired", table)
                index.generation = -1
            self.ready |= tables
            self._generation = self._store.generation

    def _texts(self, table: str, keys: list[int]) -> tuple[list[int], list[str]]:
        """The texts of ``keys`` as committed (``apply`` indexes the same), a batch of
        reads at a time; keys the rows do not hold yet are left to the commit that adds them."""
        found_keys: list[int] = []
        texts: list[str] = []
        for start in range(0, len(keys), KEYWORD_BATCH):
            batch = keys[start:start + KEYWORD_BATCH]
            for key, text in self._batch(table, batch):
                found_keys.append(key)
                texts.append(text)
        return found_keys, texts

    def _batch(self, table: str, keys: list[int]) -> list[tuple[int, str]]:
        reads = self._store.tables.retrieval_rows
        if table == "chunks":
            ids = self._store.chunk_ids_sync(keys)
            contents = reads.chunk_texts_sync(list(ids))
            return [(key, contents[cid][0]) for key, cid in ids.items() if cid in contents]
        if table == "entities":
            names = {k: (e.name_key, e.name) for k, e in self._store.entity_rows_sync(keys).items()}
            described = reads.descriptions_sync(table, [(k, name_key) for k, (name_key, _) in names.items()])
            return [(k, entity_keyword_text(name, described.get(k, ""))) for k, (_, name) in names.items()]
        metas = {k: named.meta for k, named in self._store.relation_rows_sync(keys).items()}
        described = reads.descriptions_sync(table, [(k, r.pair) for k, r in metas.items()])
        return [(k, relation_keyword_text(r.keywords, *split_pair(r.pair), described.get(k, "")))
                for k, r in metas.items()]

    def apply(self, changes: Changeset, deltas: dict[str, IndexDelta], generation: int) -> None:
        """A commit's added and removed rows in the keyword indexes (when they are in use)."""
        with self._lock:
            if not self.ready:
                return
            texts = {
                "chunks": [(c.key, c.content) for c in changes.chunks_added],
                "entities": [(e.key, entity_keyword_text(e.name, e.description)) for e in changes.entities_upserted],
                "relations": [(r.key, relation_keyword_text(r.keywords, r.source, r.target, r.description))
                              for r in changes.relations_upserted],
            }
            for table, delta in deltas.items():
                if table not in self.ready:   # not in use (the community summaries have none)
                    continue
                index = self._indexes[table]
                index.remove(delta.removed_keys)
                added = set(delta.added_keys)
                new = [(key, text) for key, text in texts[table] if key in added]
                index.add([key for key, _ in new], [text for _, text in new])
                if index.needs_rebuild():
                    self._rebuild_in_background(table)
                index.generation = -1
            self._generation = generation

    def _rebuild_in_background(self, table: str) -> None:
        """A new index built from the tables in a thread of its own (20 s at 100k chunks: never on
        the commit path), then swapped in with the commits made meanwhile."""
        running = self._rebuilds.get(table)
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(target=self._rebuild, args=(table,), name=f"keywords-{table}", daemon=True)
        self._rebuilds[table] = thread
        thread.start()

    def _rebuild(self, table: str) -> None:
        try:
            fresh = self._backend.new_keywords(self._data_dir / f"{table}.bm25", keyword_b(table))
            fresh.rebuild(*self._texts(table, self._store.tables.keys_sync(table).tolist()))
            with self._lock:   # the commits since the tables were read: a comparison of key sets
                live, built = self._indexes[table].keys(), fresh.keys()
                fresh.remove(np.setdiff1d(built, live).tolist())
                fresh.add(*self._texts(table, np.setdiff1d(live, built).tolist()))
                fresh.generation = -1
                self._indexes[table] = fresh
        except Exception:  # a thread of its own: logged; the next commit past the share tries again
            log.exception("keyword index %s was not rebuilt", table)

    def settle_sync(self) -> None:
        """Wait for the keyword rebuilds under way (closing, tests). Blocking."""
        for thread in list(self._rebuilds.values()):
            thread.join()

    def save(self) -> None:
        with self._lock:
            for table in self.ready:
                index = self._indexes[table]
                if index.generation != self._generation:
                    index.save(self._generation)

    def save_quietly(self) -> None:
        try:
            self.save()
        except OSError as exc:  # the tables are the truth: the next first use builds them again
            log.warning("keyword indexes not saved (%s)", exc)


KEYWORD_BATCH = 10_000  # keys per read of texts when a keyword index is healed or rebuilt


def keyword_b(table: str) -> float:
    """BM25's length normalisation for ``table``'s keyword index: none for the entities' merged
    descriptions (``keywords_bm25.ENTITY_B``), the usual for chunks and relations."""
    return ENTITY_B if table == "entities" else B


def entity_keyword_text(name: str, description: str) -> str:
    return f"{name}\n{description}"


def relation_keyword_text(keywords: list[str] | tuple[str, ...], source: str, target: str, description: str) -> str:
    return f"{', '.join(keywords)}\t{source}\t{target}\n{description}"


