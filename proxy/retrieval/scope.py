"""A retrieval restricted by a metadata filter (``proxy/core/metadata.py``): chunks of the matching
documents only, and the entities and relations with at least one source among those chunks.

``Scope`` is what a filter lets through, computed once per set of matching documents and store
generation (``ScopeCache``); ``matching_documents`` says which documents a filter matches.
``proxy/retrieval/scoped_store.py`` is the store as a scoped retrieval sees it. The retriever also
drops out-of-scope finds after each channel (``restrict``), so a channel that reads around the
view still cannot leak.

Community summaries are written from the whole graph, so a filtered retrieval uses none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.core.metadata import Filter
from proxy.retrieval.found import Found

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalSource

CACHED_SCOPES = 16


@dataclass(frozen=True)
class Scope:
    documents: frozenset[str]                    # the matching documents' names
    chunks: frozenset[str]                       # their chunk ids
    entities: frozenset[str]                     # name keys of the entities they source
    relations: frozenset[str]                    # pair keys of the relations they source
    vector_keys: dict[str, frozenset[int]]       # table -> the in-scope rows' vector keys
    # chunk id -> what its extraction said (a ChunkIndex), read once per scope: a scope lives for one
    # store generation, and a merge (new aliases) or a re-extraction moves the generation on
    said: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        return not self.chunks

    def restrict(self, found: Found) -> Found:
        """``found`` without anything outside the scope; the kept items' sources narrowed to it."""
        entities = [e for e in found.entities if e.key in self.entities]
        relations = [r for r in found.relations if r.pair in self.relations]
        for entity in entities:
            entity.source_ids = [c for c in entity.source_ids if c in self.chunks]
        for relation in relations:
            relation.source_ids = [c for c in relation.source_ids if c in self.chunks]
        return Found(entities, relations, [c for c in found.chunks if c.id in self.chunks], [])


def compute_scope(store: RetrievalSource, documents: frozenset[str]) -> Scope:
    """The scope of the documents named ``documents``, from the store's in-memory rows: copied under
    the store's lock (a few ms at 100k entities; the records are never changed in place), then
    scanned outside it, so that commits do not wait for the scan. Blocking."""
    material = store.scope_material_sync()
    cited, chunk_keys, entity_rows, relation_rows = (material.chunk_documents, material.chunk_keys,
                                                     material.entities, material.relations)
    chunks = frozenset(c for c, names in cited if not documents.isdisjoint(names))
    entity_rows = [m for m in entity_rows if not chunks.isdisjoint(m.source_ids)]
    relation_rows = [m for m in relation_rows if not chunks.isdisjoint(m.source_ids)]
    return Scope(documents, chunks, frozenset(m.name_key for m in entity_rows),
                 frozenset(m.pair for m in relation_rows),
                 {"chunks": frozenset(chunk_keys[c] for c in chunks if c in chunk_keys),
                  "entities": frozenset(m.key for m in entity_rows),
                  "relations": frozenset(m.key for m in relation_rows),
                  "communities": frozenset()})


class ScopeCache:
    """Scopes by (store generation, matching documents): a commit makes them stale, and the same
    filter asked again (a conversation, a dashboard) costs a set lookup."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[int, frozenset[str]], Scope] = {}
        self._lock = threading.Lock()   # worker threads share it; held for the dict's changes only

    def get(self, store: RetrievalSource, documents: frozenset[str]) -> Scope:
        """Blocking: call it from a worker thread."""
        key = (store.generation, documents)
        scope = self._scopes.get(key)
        if scope is None:
            scope = compute_scope(store, documents)
            with self._lock:
                self._scopes[key] = scope
                while len(self._scopes) > CACHED_SCOPES:
                    self._scopes.pop(next(iter(self._scopes)))
        return scope


def matching_documents(where: Filter, documents: list[tuple[str, dict[str, Any]]]) -> frozenset[str]:
    """The names of ``documents`` ((name, metadata) pairs) that ``where`` matches. Blocking: a
    thousand documents take a millisecond or so, so it runs in a worker thread."""
    return frozenset(name for name, metadata in documents if where.matches(name, metadata))
