"""Each entity's incident relations as the entity channels rank them: the relation, its entities'
names and how central it is (its endpoints' degrees summed). A hub touches thousands of relations
and every turn that names it ranked them all again (listing its edges, a key and a row for each,
the degrees): they are the same until the next commit, so they are listed once per generation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.store.changes import pair_key

if TYPE_CHECKING:
    from proxy.store.protocols.graph import Graph
    from proxy.store.rows_memory import MemoryRows, RelationMeta

CACHED_ENTITIES = 4096   # entities whose lists are kept per generation (the hubs turns name again and again)


@dataclass(frozen=True, slots=True)
class Incident:
    meta: RelationMeta
    central: int        # the endpoints' degrees summed
    source_name: str
    target_name: str


def incident_of(rows: MemoryRows, graph: Graph, key: str) -> tuple[Incident, ...]:
    """``key``'s relations in the graph's neighbour order (an edge without a row is left out).
    Called under the store's lock; ``graph`` may be a filter's view of it."""
    pairs = [pair_key(key, neighbour) for neighbour in graph.neighbourhood(key, 1) if neighbour != key]
    metas = [meta for meta in (rows.relation(pair) for pair in dict.fromkeys(pairs)) if meta is not None]
    ends = list({end for meta in metas for end in (meta.source, meta.target)})
    degree = graph.degrees(ends) if ends else {}
    names = {end: rows.name_of(end) for end in ends}
    return tuple(Incident(meta, degree.get(meta.source, 0) + degree.get(meta.target, 0),
                          names[meta.source], names[meta.target]) for meta in metas)


class IncidentCache:
    """``incident_of`` per entity, kept until the store's generation changes. Used under the
    store's lock (which orders its readers), so it needs none of its own."""

    def __init__(self) -> None:
        self._generation = -1
        self._lists: dict[str, tuple[Incident, ...]] = {}

    def read(self, rows: MemoryRows, graph: Graph, generation: int, key: str) -> tuple[Incident, ...]:
        if generation != self._generation:
            self._generation, self._lists = generation, {}
        found = self._lists.get(key)
        if found is None:
            if len(self._lists) >= CACHED_ENTITIES:
                self._lists.pop(next(iter(self._lists)))   # the oldest first
            found = self._lists[key] = incident_of(rows, graph, key)
        return found


def incident_relations(lists: list[tuple[Incident, ...]]) -> list[Incident]:
    """Several entities' lists as one, each relation once, where it first comes."""
    seen: set[str] = set()
    merged = []
    for found in lists:
        for incident in found:
            if incident.meta.pair not in seen:
                seen.add(incident.meta.pair)
                merged.append(incident)
    return merged
