"""The store's reads of its in-memory rows and graph, each by name: what retrieval and the scope of a
metadata filter ask of them (``protocols/retrieval.py``), instead of handing the store a callback
that reads its internals.

``NamedReads`` is written once over ``read_memory_sync``: the store (``store.py``) runs each read
under its lock; ``MemoryView`` runs the same reads over the graph as a scope sees it (only the
scope's entities and relations), for a retrieval under a metadata filter. Every read is blocking:
call it from a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from proxy.store.changes import pair_key
from proxy.store.incident import Incident, incident_of, incident_relations

if TYPE_CHECKING:
    from proxy.store.protocols.graph import Graph
    from proxy.store.rows_memory import EntityMeta, MemoryRows, RelationMeta

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NamedRelation:
    """A relation's row with its two entities' names (their keys when they are gone)."""

    meta: RelationMeta
    source_name: str
    target_name: str


@dataclass(frozen=True)
class ScopeMaterial:
    """What a metadata filter's scope is computed from, copied under the lock: each chunk's
    documents, each chunk's vector key, every entity and relation row."""

    chunk_documents: list[tuple[str, tuple[str, ...]]]
    chunk_keys: dict[str, int]
    entities: list[EntityMeta]
    relations: list[RelationMeta]


class GraphScope(Protocol):
    """Which entities (keys) and relations (pair keys) a view of the graph keeps."""

    @property
    def entities(self) -> frozenset[str]: ...

    @property
    def relations(self) -> frozenset[str]: ...


class ScopedGraph:
    """The graph with only the scope's edges (what neighbour walks and degrees see); every other
    read passes through."""

    def __init__(self, graph: Graph, scope: GraphScope) -> None:
        self._graph, self._scope = graph, scope

    def neighbourhood(self, key: str, depth: int = 1) -> list[str]:
        if key not in self._scope.entities:
            return []
        if depth != 1:
            return [k for k in self._graph.neighbourhood(key, depth) if k in self._scope.entities]
        relations = self._scope.relations
        return [k for k in self._graph.neighbourhood(key, 1) if k == key or pair_key(key, k) in relations]

    def degrees(self, keys: list[str]) -> dict[str, int]:
        return {key: sum(1 for k in self.neighbourhood(key, 1) if k != key) for key in keys}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


def _named(rows: MemoryRows, meta: RelationMeta) -> NamedRelation:
    return NamedRelation(meta, rows.name_of(meta.source), rows.name_of(meta.target))


class NamedReads:
    """The named reads, over whatever ``read_memory_sync`` reads (the store's rows and graph, or a
    scope's view of them)."""

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        raise NotImplementedError

    def entity_rows_sync(self, keys: list[int]) -> dict[int, EntityMeta]:
        """The entities of these vector keys."""
        return self.read_memory_sync(lambda rows, graph: {k: rows.entities[k] for k in keys if k in rows.entities})

    def entities_named_sync(self, names: list[str]) -> dict[str, EntityMeta]:
        """The entities of these name keys."""
        def read(rows: MemoryRows, graph: Graph) -> dict[str, EntityMeta]:
            found = {n: rows.entity(n) for n in names}
            return {n: m for n, m in found.items() if m is not None}
        return self.read_memory_sync(read)

    def relation_rows_sync(self, keys: list[int]) -> dict[int, NamedRelation]:
        """The relations of these vector keys, with their entities' names."""
        return self.read_memory_sync(lambda rows, graph: {k: _named(rows, rows.relations[k])
                                                          for k in keys if k in rows.relations})

    def relations_paired_sync(self, pairs: list[str]) -> dict[str, NamedRelation]:
        """The relations of these pair keys, with their entities' names."""
        def read(rows: MemoryRows, graph: Graph) -> dict[str, NamedRelation]:
            found = {p: rows.relation(p) for p in pairs}
            return {p: _named(rows, m) for p, m in found.items() if m is not None}
        return self.read_memory_sync(read)

    def chunk_keys_sync(self, ids: list[str]) -> dict[str, int]:
        """Chunk id -> vector key."""
        return self.read_memory_sync(lambda rows, graph: {i: rows.chunk_keys[i] for i in ids if i in rows.chunk_keys})

    def chunk_ids_sync(self, keys: list[int]) -> dict[int, str]:
        """Vector key -> chunk id."""
        return self.read_memory_sync(lambda rows, graph: {k: rows.chunk_ids[k] for k in keys if k in rows.chunk_ids})

    def chunk_documents_sync(self, ids: list[str]) -> dict[str, list[str]]:
        """Chunk id -> the names of the documents that hold it."""
        return self.read_memory_sync(lambda rows, graph: {i: list(rows.chunk_documents.get(i, ())) for i in ids})

    def sources_sync(self, table: str, keys: list[int]) -> dict[int, tuple[str, tuple[str, ...]]]:
        """Vector key -> (name key or pair key, source chunk ids) of entities or relations."""
        def read(rows: MemoryRows, graph: Graph) -> dict[int, tuple[str, tuple[str, ...]]]:
            if table == "entities":
                return {k: (m.name_key, tuple(m.source_ids)) for k in keys if (m := rows.entities.get(k)) is not None}
            return {k: (r.pair, tuple(r.source_ids)) for k in keys if (r := rows.relations.get(k)) is not None}
        return self.read_memory_sync(read)

    def degrees_sync(self, keys: list[str]) -> dict[str, int]:
        return self.read_memory_sync(lambda rows, graph: graph.degrees(keys))

    def edge_facts_sync(self, pairs: list[str]) -> dict[str, tuple[tuple[str, ...], str, str, int]]:
        """Pair -> (keywords, source name, target name, vector key) of the known ones: what weighing an
        edge against the question needs, read without building a record per edge."""
        def read(rows: MemoryRows, graph: Graph) -> dict[str, tuple[tuple[str, ...], str, str, int]]:
            facts = {}
            for pair in pairs:
                meta = rows.relation(pair)
                if meta is not None:
                    source, target = rows.entity(meta.source), rows.entity(meta.target)
                    facts[pair] = (tuple(meta.keywords), source.name if source else meta.source,
                                   target.name if target else meta.target, meta.key)
            return facts
        return self.read_memory_sync(read)

    def incident_pairs_sync(self, keys: list[str]) -> list[str]:
        """Pair keys of every edge touching ``keys``, in the order of ``keys`` (the first end met first)."""
        def read(rows: MemoryRows, graph: Graph) -> list[str]:
            pairs: dict[str, None] = {}
            for key in keys:
                for neighbour in graph.neighbourhood(key, 1):
                    if neighbour != key:
                        pairs.setdefault(pair_key(key, neighbour))
            return list(pairs)
        return self.read_memory_sync(read)

    def pairs_among_sync(self, keys: list[str]) -> list[str]:
        """Pair keys of the edges joining two of ``keys``, in the order of ``incident_pairs_sync``: a
        hub's other edges (thousands) are passed over without making their keys."""
        among = set(keys)

        def read(rows: MemoryRows, graph: Graph) -> list[str]:
            pairs: dict[str, None] = {}
            for key in keys:
                for neighbour in graph.neighbourhood(key, 1):
                    if neighbour != key and neighbour in among:
                        pairs.setdefault(pair_key(key, neighbour))
            return list(pairs)
        return self.read_memory_sync(read)

    def incident_listed_sync(self, keys: list[str]) -> list[Incident]:
        """The relations touching ``keys`` (each once, in the order of ``keys``), listed afresh."""
        return self.read_memory_sync(lambda rows, graph: incident_relations([incident_of(rows, graph, key)
                                                                               for key in keys]))

    def entity_count_sync(self) -> int:
        return self.read_memory_sync(lambda rows, graph: len(rows.entities))

    def entity_names_sync(self) -> tuple[dict[str, str], dict[int, str]]:
        """Every entity's name by key, and its key by vector key (copies)."""
        return self.read_memory_sync(lambda rows, graph: ({m.name_key: m.name for m in rows.entities.values()},
                                                          {m.key: m.name_key for m in rows.entities.values()}))

    def best_connected_sync(self, count: int) -> tuple[list[str], list[int]]:
        """The best-connected entities (at most ``count``) and their vector keys."""
        def read(rows: MemoryRows, graph: Graph) -> tuple[list[str], list[int]]:
            if len(rows.entities) < 2:
                return [], []
            wanted = [k for k in graph.best_connected(count) if k in rows.entity_keys]
            return wanted, [rows.entity_keys[k] for k in wanted]
        return self.read_memory_sync(read)

    def scope_material_sync(self) -> ScopeMaterial:
        """The rows a filter's scope is computed from, copied under the lock (a few ms at 100k
        entities; the records are never changed in place) to be scanned outside it."""
        return self.read_memory_sync(lambda rows, graph: ScopeMaterial(
            list(rows.chunk_documents.items()), dict(rows.chunk_keys), list(rows.entities.values()),
            list(rows.relations.values())))


class MemoryView(NamedReads):
    """The named reads of ``reads`` over the graph as ``scope`` sees it."""

    def __init__(self, reads: NamedReads, scope: GraphScope) -> None:
        self._reads, self._scope = reads, scope

    def read_memory_sync(self, read: Callable[[MemoryRows, Graph], T]) -> T:
        scope = self._scope
        return self._reads.read_memory_sync(lambda rows, graph: read(rows, cast("Graph", ScopedGraph(graph, scope))))
