"""Entity linking's name index, kept beside the store's rows: every entity's name and every merge
alias by their core (``name_index.py``). Built beside the first turns (seconds at 1M entities; a
small store's before the first request, ``proxy/knowledge/service.py``), outside the store's lock,
then kept in step with every commit under it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar

from proxy.core.names import name_words
from proxy.store.changes import Changeset
from proxy.store.name_index import NameIndex

if TYPE_CHECKING:
    from proxy.store.protocols.graph import Graph
    from proxy.store.rows_memory import MemoryRows

T = TypeVar("T")


class LinkSource(Protocol):
    """What the name index reads of its store: the rows under its lock, and the merge aliases."""

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T: ...

    def aliases_sync(self) -> dict[str, str]: ...


class NameLinking:
    def __init__(self, store: LinkSource) -> None:
        self._store = store
        self._index: NameIndex | None = None
        # while the index is built (outside the lock), the changes it must replay; None: no build
        self._pending: list[Changeset] | None = None
        self._epoch = 0   # moves when the rows are reloaded: a build begun before is dropped

    def reset(self) -> None:
        """The rows were reloaded: the index is of rows gone (under the store's lock)."""
        self._index, self._pending = None, None
        self._epoch += 1

    def apply(self, changes: Changeset) -> None:
        """A commit's entities and aliases, in the order the tables took them (under the store's lock)."""
        if self._index is None:  # not built yet: a build under way replays the change once it is done
            if self._pending is not None:
                self._pending.append(changes)
            return
        apply_names(self._index, changes)

    @property
    def ready(self) -> bool:
        """Whether the index is built (before, ``link_sync`` links nothing)."""
        return self._index is not None

    def build_sync(self) -> None:
        """Build the index outside the lock (8 s at 50k random names): the changes committed
        meanwhile are replayed before it is used. Blocking."""
        def begin(rows: MemoryRows, graph: Graph) -> tuple[list[str], int] | None:
            if self._index is not None or self._pending is not None:
                return None   # built, or being built
            self._pending = []
            return list(rows.entity_keys), self._epoch

        begun = self._store.read_memory_sync(begin)
        if begun is None:
            return
        keys, epoch = begun
        try:
            index = NameIndex.build(keys, self._store.aliases_sync())
        except BaseException:
            self._store.read_memory_sync(lambda rows, graph: setattr(self, "_pending", None))
            raise

        def finish(rows: MemoryRows, graph: Graph) -> None:
            if epoch != self._epoch:   # reloaded meanwhile: this index is of rows gone
                return
            for changes in self._pending or []:
                apply_names(index, changes)
            self._index, self._pending = index, None

        self._store.read_memory_sync(finish)

    def link_sync(self, text: str) -> list[tuple[str, float]]:
        """(entity key, confidence) of the entities ``text`` names (their names or merge aliases,
        any case, punctuation or legal suffix, one typo in a long name), best first. Blocking."""
        words = name_words(text)

        def link(rows: MemoryRows, graph: Graph) -> tuple[list[tuple[str, float]] | None, bool]:
            if self._index is None:
                return None, self._pending is not None
            entity_keys = rows.entity_keys
            return [(key, score) for key, score in self._index.link(words) if key in entity_keys], True

        linked, building = self._store.read_memory_sync(link)
        if linked is not None:
            return linked
        if not building:   # never holds a turn: the index is built beside it, and links the next ones
            threading.Thread(target=self.build_sync, name="name-index", daemon=True).start()
        return []

    def known_sync(self, keys: Iterable[str],
                   cores: Iterable[str]) -> tuple[set[str], dict[str, list[tuple[str, str, str]]]]:
        """Which of ``keys`` are entities, and for each of ``cores`` the stored names filed under it
        (an entity's, or a merge alias's) as (the entity key they resolve to, the spelling, the
        entity's type): what entity resolution at ingestion compares a batch's names with. Blocking."""
        if self._index is None:
            self.build_sync()

        def read(rows: MemoryRows, graph: Graph) -> tuple[set[str], dict[str, list[tuple[str, str, str]]]]:
            names = self._index
            present = {key for key in keys if key in rows.entity_keys}
            found: dict[str, list[tuple[str, str, str]]] = {}
            for core in cores if names is not None else ():   # None: another thread builds it just now
                for key, spelling in names.filed(core):  # type: ignore[union-attr]
                    meta = rows.entity(key)
                    if meta is not None:
                        found.setdefault(core, []).append((key, meta.name if spelling == key else spelling,
                                                           meta.type))
            return present, found

        return self._store.read_memory_sync(read)


def apply_names(names: NameIndex, changes: Changeset) -> None:
    """A commit's entities and aliases into the name index, in the order the tables took them."""
    curation = changes.curation
    for name_key in changes.entities_removed:
        names.drop_entity(name_key)
    for e in changes.entities_upserted:
        names.put_entity(e.name_key)
    for alias in curation.aliases_dropped:
        names.drop_alias(alias)
    for alias, target in curation.aliases.items():
        names.put_alias(alias, target)
    names.drop_aliases_into(curation.aliases_into_dropped)
    # the index keeps no reasons: a removed entity's aliases all leave it (a hand merge's row stays in the
    # table and is back in the index at the next start; linking skips a removed entity meanwhile anyway)
    names.drop_aliases_into(curation.resolved_into_dropped)
