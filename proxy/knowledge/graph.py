"""The knowledge graph as the console, the /rag API and scripts see it (``knowledge.graph``):
entities (list, search, page, one with its sources and relations, neighbourhood), hand curation
(edit, rename, delete, merge with a preview; relations edited and deleted) and merge suggestions.

The only way routes reach the graph: the in-memory rows and graph are read through the store's
named reads (proxy/store/entity_page_reads.py), in worker threads; SQL stays behind
``store.tables.graph_rows``, and every change is a recomputation committed by the ``Curator``
under the merge lock.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from proxy.core.errors import NotFound
from proxy.merging.curation import MAX_MERGE, Curator, MergePlan
from proxy.merging.recompute import Integrator
from proxy.merging.suggestions import Suggestion, SuggestionFinder
from proxy.store.changes import pair_key
from proxy.store.entity_page_reads import Edge, Node
from proxy.store.graph_igraph import force_layout
from proxy.store.rows_memory import EntityMeta
from proxy.store.store import KnowledgeStore
from proxy.text.fold import fold

SHOWN_CHUNKS = 20  # an entity's page shows its first source chunks

# force_layout: the console draws neighbourhoods with the graph engine's layout
__all__ = ["MAX_MERGE", "Edge", "EntityListing", "EntityPage", "GraphService", "ListedEntity", "Node", "force_layout"]


@dataclass
class ListedEntity:
    name_key: str
    name: str
    type: str
    source_ids: tuple[str, ...]
    description: str


@dataclass
class EntityListing:
    rows: list[tuple[ListedEntity, int]]  # (entity, degree)
    total: int


@dataclass
class EntityPage:
    entity: dict[str, Any]            # the row, its documents, first chunks, aliases, edited?
    relations: list[dict[str, Any]]   # the heaviest, with descriptions
    relation_total: int
    nodes: list[Node]                 # the neighbourhood
    edges: list[Edge]
    degree: int


class GraphService:
    def __init__(self, store: KnowledgeStore, curator: Curator, finder: SuggestionFinder) -> None:
        self.store = store
        self.tables = store.tables.graph_rows
        self.curator = curator
        self.finder = finder

    @classmethod
    def build(cls, store: KnowledgeStore, integrator: Integrator,
              exclusive: Callable[[], AbstractAsyncContextManager[None]]) -> GraphService:
        """``integrator`` recomputes names from their sources, ``exclusive()`` is the merge lock
        (the pipeline's: no document merges while a curation commits)."""
        return cls(store, Curator(store, integrator, exclusive), SuggestionFinder(store))

    # --- entities ---

    async def list_entities(self, *, search: str, kind: str, sort: str, descending: bool, limit: int,
                            offset: int) -> EntityListing:
        """One page of entities with their degrees and descriptions, by name or by degree."""
        if sort == "name":
            keys, total = await self.tables.names_page(search, kind, descending, limit, offset)
            found = await self.store.entities_with_degrees(keys)
        elif search or kind:
            keys = await self.tables.matching_keys(search, kind)
            if search and not kind and fold(search) != search.casefold():
                # typed in another form of its script (traditional, full-width): the name index folds it
                named = await anyio.to_thread.run_sync(self.store.link_sync, search)
                keys += [key for key, _ in named if key not in set(keys)]
            found, total = await anyio.to_thread.run_sync(self.store.ranked_entities_sync, keys, descending,
                                                          limit, offset)
        else:
            found, total = await anyio.to_thread.run_sync(self.store.ranked_entities_sync, None, descending,
                                                          limit, offset)
        text = await self.tables.descriptions("entities", [(meta.key, meta.name_key) for meta, _ in found])
        return EntityListing([(ListedEntity(m.name_key, m.name, m.type, m.source_ids, text.get(m.key, "")), degree)
                              for m, degree in found], total)

    async def entity_types(self) -> list[tuple[str, int]]:
        """Entity types with their counts, most common first (at most 100)."""
        return await self.tables.entity_types()

    async def resolve_name(self, key: str) -> str | None:
        """The entity key for a name as extracted: itself, or what it was merged into."""
        return await self.tables.resolve_name(key)

    async def entity_meta(self, key: str) -> EntityMeta | None:
        return await self.store.entity_row(key)

    async def degree(self, key: str) -> int:
        return await self.store.entity_degree(key)

    async def entity_detail(self, key: str) -> dict[str, Any] | None:
        """An entity's page: its row, the documents citing it, its first chunks, aliases, edited?"""
        return await self.tables.entity_detail(key, SHOWN_CHUNKS)

    async def entity(self, key: str) -> dict[str, Any]:
        """The entity as /rag/entities shows it: name, type, description, sources, degree, the names
        merged into it (``aliases``) and those entity resolution merged with its evidence (``resolved``)."""
        found = await self.store.entity_summary(key)
        if found is None:
            raise NotFound(f"no entity named {key!r}")
        meta, degree = found
        text = await self.tables.descriptions("entities", [(meta.key, key)])
        detail = await self.tables.entity_detail(key, 0) or {}
        return {"name": meta.name, "type": meta.type, "description": text.get(meta.key, ""),
                "sources": list(meta.source_ids), "degree": degree, "aliases": detail.get("aliases", []),
                "resolved": detail.get("resolved", [])}

    async def merged_into(self, key: str) -> str | None:
        """What a name that is no entity was merged into (None: it never was, or is an entity)."""
        if await self.entity_meta(key) is not None:
            return None
        return await self.tables.alias_target(key)

    async def entity_page(self, key: str, relations: int, depth: int, cap: int) -> EntityPage | None:
        """Everything an entity's page shows (None: no such entity): its row and sources, its
        relations (at most ``relations``, heaviest first), its neighbourhood and degree."""
        detail = await self.tables.entity_detail(key, SHOWN_CHUNKS)
        if detail is None:
            return None
        (shown, total, keys), (nodes, edges), degree = await self.store.entity_view(key, relations, depth, cap)
        await self._describe_relations(shown, keys)
        return EntityPage(detail, shown, total, nodes, edges, degree)

    async def _describe_relations(self, shown: list[dict[str, Any]], keys: list[tuple[int, str]]) -> None:
        text = await self.tables.descriptions("relations", keys)
        for relation, (vector_key, _) in zip(shown, keys, strict=True):
            relation["description"] = text.get(vector_key, "")

    async def neighbourhood(self, key: str, depth: int, cap: int) -> tuple[list[Node], list[Edge]]:
        """The entity and its neighbours up to ``depth`` hops, at most ``cap`` nodes, best connected first."""
        return await self.store.entity_neighbourhood(key, depth, cap)

    async def picked(self, keys: list[str]) -> list[dict[str, Any]]:
        """Entities picked for a merge: key, name, type, degree, sources, description."""
        out, vector_keys = await self.store.picked_entities(keys)
        text = await self.tables.descriptions("entities", vector_keys)
        for item, (vector_key, _) in zip(out, vector_keys, strict=True):
            item["description"] = text.get(vector_key, "")
        return out

    # --- curation (see proxy/merging/curation.py) ---

    async def plan_merge(self, keys: list[str], target_name: Any, *, type: Any = None,
                         description: Any = None) -> MergePlan:
        return await self.curator.plan_merge(keys, target_name, type=type, description=description)

    async def merge(self, keys: list[str], target_name: Any, *, type: Any = None,
                    description: Any = None) -> dict[str, Any]:
        return await self.curator.merge(keys, target_name, type=type, description=description)

    async def undo_resolution(self, alias: str) -> dict[str, Any]:
        return await self.curator.undo_resolution(alias)

    async def edit_entity(self, key: str, *, name: Any = None, type: Any = None,
                          description: Any = None) -> dict[str, Any]:
        return await self.curator.edit_entity(key, name=name, type=type, description=description)

    async def delete_entity(self, key: str) -> dict[str, Any]:
        return await self.curator.delete_entity(key)

    async def edit_relation(self, pair: str, *, keywords: Any = None, description: Any = None,
                            weight: Any = None) -> dict[str, Any]:
        return await self.curator.edit_relation(pair, keywords=keywords, description=description, weight=weight)

    async def delete_relation(self, pair: str) -> dict[str, Any]:
        return await self.curator.delete_relation(pair)

    # --- merge suggestions ---

    async def suggestions(self, threshold: float) -> list[Suggestion]:
        """Current suggestions, best first, dismissed ones left out (computed in a worker thread)."""
        return await anyio.to_thread.run_sync(self.finder.find, threshold)

    async def dismiss_suggestion(self, a: str, b: str) -> None:
        await self.tables.dismiss(pair_key(a, b))

    def refresh_suggestions(self, threshold: float) -> None:
        """Compute suggestions in the background (they take seconds on a big graph)."""
        self.finder.refresh_in_background(threshold)
