"""Merging extraction results into the graph, LightRAG's rules, recomputed from the sources.

An entity's (or relation's) state is a function of the stored extraction results of the chunks
that mention it: type by majority, descriptions deduplicated and joined (summarised by the LLM
past a threshold), relation weights summed and keywords unioned, source chunk ids kept. Adding
a document and deleting one are the same operation, "recompute the touched names from their
remaining sources", so deletion needs no extraction call and leaves no orphan.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from proxy.extraction.results import ExtractedEntity, ExtractedRelation, ExtractionResult, name_key
from proxy.store.changes import EntityRow, RelationRow, pair_key

UNKNOWN_TYPE = "unknown"


@dataclass
class ExistingEntity:
    name: str
    source_ids: list[str]
    key: int
    embed_hash: str
    embedding: object


@dataclass
class EntityState:
    name_key: str
    name: str
    type: str
    fragments: list[str]
    source_ids: list[str]


@dataclass
class RelationState:
    pair_key: str
    source: str
    target: str
    keywords: list[str]
    fragments: list[str]
    weight: float
    source_ids: list[str]


def resolve(aliases: dict[str, str], key: str) -> str:
    return aliases.get(key, key)


@dataclass
class ChunkIndex:
    """One chunk's extraction result keyed by entity key and pair key (built once per merge)."""
    entities: dict[str, list[ExtractedEntity]] = field(default_factory=dict)
    relations: dict[str, list[ExtractedRelation]] = field(default_factory=dict)
    spellings: dict[str, str] = field(default_factory=dict)  # first spelling of each key in the chunk


def index_result(result: ExtractionResult, aliases: dict[str, str]) -> ChunkIndex:
    index = ChunkIndex()
    for entity in result.entities:
        key = resolve(aliases, name_key(entity.name))
        index.entities.setdefault(key, []).append(entity)
        index.spellings.setdefault(key, entity.name)
    for relation in result.relations:
        a, b = resolve(aliases, name_key(relation.source)), resolve(aliases, name_key(relation.target))
        if a == b:
            continue
        index.relations.setdefault(pair_key(a, b), []).append(relation)
        index.spellings.setdefault(a, relation.source)
        index.spellings.setdefault(b, relation.target)
    return index


def mentions(index: ChunkIndex) -> tuple[set[str], set[str]]:
    """Entity keys (including relation endpoints) and relation pair keys a chunk names."""
    return set(index.spellings), set(index.relations)


def merged_sources(existing: Iterable[str], added: Iterable[str], removed: set[str]) -> list[str]:
    return [s for s in dict.fromkeys([*existing, *added]) if s not in removed]


def entity_state(key: str, existing_name: str | None, sources: list[str], chunks: dict[str, ChunkIndex]) -> EntityState:
    types: Counter[str] = Counter()
    fragments: list[str] = []
    spelling = existing_name
    for chunk_id in sources:
        index = chunks.get(chunk_id)
        if index is None:
            continue
        for entity in index.entities.get(key, ()):
            types[entity.type] += 1
            if entity.description and entity.description not in fragments:
                fragments.append(entity.description)
        spelling = spelling or index.spellings.get(key)
    # majority type; ties go to the type seen first (Counter keeps insertion order)
    kind = types.most_common(1)[0][0] if types else UNKNOWN_TYPE
    return EntityState(key, spelling or key, kind, fragments, sources)


def relation_state(pair: str, sources: list[str], chunks: dict[str, ChunkIndex]) -> RelationState:
    source, target = pair.split("\x1f", 1)
    keywords: dict[str, str] = {}
    fragments: list[str] = []
    weight = 0.0
    for chunk_id in sources:
        index = chunks.get(chunk_id)
        for relation in index.relations.get(pair, ()) if index else ():
            weight += relation.weight
            for keyword in relation.keywords:
                keywords.setdefault(keyword.casefold(), keyword)
            if relation.description and relation.description not in fragments:
                fragments.append(relation.description)
    return RelationState(pair, source, target, list(keywords.values()), fragments, weight, sources)


def embed_hash(model: str, text: str) -> str:
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()


def entity_text(name: str, description: str) -> str:
    return f"{name}\n{description}".strip()


def relation_text(keywords: list[str], source_name: str, target_name: str, description: str) -> str:
    return f"{', '.join(keywords)}\t{source_name}\t{target_name}\n{description}".strip()


def entity_row(state: EntityState, description: str, digest: str, existing: ExistingEntity | None,
               embedding: object) -> EntityRow:
    reuse = existing is not None and existing.embed_hash == digest
    return EntityRow(state.name_key, state.name, state.type, description, state.source_ids, digest,
                     existing.embedding if reuse else embedding,  # type: ignore[union-attr,arg-type]
                     key=existing.key if reuse else 0)  # type: ignore[union-attr]


def relation_row(state: RelationState, description: str, digest: str, existing: ExistingEntity | None,
                 embedding: object) -> RelationRow:
    reuse = existing is not None and existing.embed_hash == digest
    return RelationRow(state.pair_key, state.source, state.target, state.keywords, description, state.weight,
                       state.source_ids, digest,
                       existing.embedding if reuse else embedding,  # type: ignore[union-attr,arg-type]
                       key=existing.key if reuse else 0)  # type: ignore[union-attr]
