"""What an agent looks up in the graph (the MCP tools and resources): entities by name or by
similarity to a text, an entity's relations out to a few hops, a document with its text.

The in-memory rows and graph are read through the store's named reads
(proxy/store/entity_page_reads.py); descriptions and texts come from the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from proxy.core.errors import NotFound
from proxy.extraction.results import name_key

if TYPE_CHECKING:
    from proxy.knowledge.service import Knowledge

SIMILARITY_OVERFETCH = 10   # a type filter keeps some of the nearest: search this many times more
MAX_SEARCH = 1000


@dataclass
class EntityMatch:
    name: str
    type: str
    description: str
    degree: int
    sources: int
    score: float | None = None   # similarity to the text (by similarity only)


async def resolve_entity(knowledge: Knowledge, name: str) -> str:
    """The entity key for a name (case-insensitive; a name merged away gives its target), or
    NotFound naming it."""
    key = name_key(name)
    if await knowledge.graph.entity_meta(key) is not None:
        return key
    target = await knowledge.graph.merged_into(key)
    if target is None:
        raise NotFound(f"no entity named {name!r}")
    return target


async def entities_by_name(knowledge: Knowledge, text: str, kind: str, limit: int) -> list[EntityMatch]:
    """Entities whose name contains ``text`` (case-insensitive), of type ``kind`` when given, best
    connected first."""
    listing = await knowledge.graph.list_entities(search=text, kind=kind, sort="degree", descending=True,
                                                  limit=limit, offset=0)
    return [EntityMatch(e.name, e.type, e.description, degree, len(e.source_ids)) for e, degree in listing.rows]


async def entities_by_similarity(knowledge: Knowledge, text: str, kind: str, limit: int) -> list[EntityMatch]:
    """The entities whose name and description embed nearest to ``text``, of type ``kind`` when
    given, nearest first, with their cosine similarity."""
    vector = (await knowledge.models.embed_for_search([text]))[0]
    count = min(MAX_SEARCH, limit * SIMILARITY_OVERFETCH if kind else limit)
    store = knowledge.store
    nearest = await anyio.to_thread.run_sync(store.search_sync, "entities", vector, count)
    found = await store.entities_near(nearest, kind, limit)
    text_of = await store.tables.graph_rows.descriptions("entities", [(f[0], f[1]) for f in found])
    return [EntityMatch(name, type_, text_of.get(key, ""), degree, sources, round(score, 4))
            for key, _, name, type_, degree, sources, score in found]


@dataclass
class Neighbourhood:
    entity: str                          # the entity's display name
    entities: list[dict[str, Any]]       # name, type, degree: the entity and its neighbours
    relations: list[dict[str, Any]]      # source, target, keywords, weight, description
    relation_total: int                  # relations among those entities before the cap
    capped: bool                         # the cap was reached: neighbours or relations may have been left out


async def neighbourhood(knowledge: Knowledge, name: str, depth: int, cap: int) -> Neighbourhood:
    """The entity's relations out to ``depth`` hops: its own first, then the heaviest, at most
    ``cap`` relations among the entity and at most ``cap`` neighbours (best connected first)."""
    key = await resolve_entity(knowledge, name)
    entities, found, capped = await knowledge.store.entity_surroundings(key, depth, cap)
    found.sort(key=lambda item: (not item[2]["direct"], -item[2]["weight"], item[1]))
    shown = found[:cap]
    text_of = await knowledge.store.tables.graph_rows.descriptions("relations", [(k, p) for k, p, _ in shown])
    relations = [{**relation, "description": text_of.get(vector_key, "")} for vector_key, _, relation in shown]
    display = next((e["name"] for e in entities if name_key(e["name"]) == key), name)
    return Neighbourhood(display, entities, relations, len(found), capped or len(found) > cap)


async def document_with_text(knowledge: Knowledge, document_id: str) -> dict[str, Any]:
    """The document as /rag/documents/{id} shows it (its row and counts) with its text; NotFound
    naming it when there is none."""
    document = await knowledge.documents.get(document_id)
    document["counts"] = await knowledge.documents.counts(document_id)
    _, text = await knowledge.store.tables.documents.with_text(document_id)
    document["text"] = text
    return document
