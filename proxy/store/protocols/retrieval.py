"""What a retrieval reads of the knowledge store: its narrow face. The channels, the fusion, the
ranking and the context see the store only through these reads (``proxy/retrieval/``); the store
(``store.py``) offers them, and so does a retrieval's view of it under a metadata filter
(``proxy/retrieval/scoped_store.py``). Every read is blocking: call it from a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from proxy.store.incident import Incident
    from proxy.store.memory_reads import GraphScope, MemoryView, NamedRelation, ScopeMaterial
    from proxy.store.protocols.communities import StoredCommunity
    from proxy.store.rows_memory import EntityMeta


class RetrievalReads(Protocol):
    @property
    def generation(self) -> int:
        """Moves with every commit: what is cached per commit is keyed by it."""
        ...

    # --- searches: (vector key, score), best first ---

    def search_sync(self, table: str, vector: np.ndarray, count: int) -> list[tuple[int, float]]: ...

    def similarities_sync(self, table: str, keys: list[int], vector: np.ndarray) -> np.ndarray: ...

    def vector_count(self, table: str) -> int: ...

    def keyword_search_sync(self, table: str, query: str, count: int) -> list[tuple[int, float]]: ...

    def keyword_count(self, table: str) -> int: ...

    def link_sync(self, text: str) -> list[tuple[str, float]]:
        """(entity key, confidence) of the entities the text names."""
        ...

    # --- rows: by vector key, name key, pair key or chunk id ---

    def entity_rows_sync(self, keys: list[int]) -> dict[int, EntityMeta]: ...

    def entities_named_sync(self, names: list[str]) -> dict[str, EntityMeta]: ...

    def relation_rows_sync(self, keys: list[int]) -> dict[int, NamedRelation]: ...

    def relations_paired_sync(self, pairs: list[str]) -> dict[str, NamedRelation]: ...

    def chunk_keys_sync(self, ids: list[str]) -> dict[str, int]: ...

    def chunk_ids_sync(self, keys: list[int]) -> dict[int, str]: ...

    def chunk_documents_sync(self, ids: list[str]) -> dict[str, list[str]]: ...

    def community_rows_sync(self, keys: list[int]) -> dict[int, StoredCommunity]: ...

    # --- texts ---

    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]: ...

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]: ...

    # --- the graph ---

    def degrees_sync(self, keys: list[str]) -> dict[str, int]: ...

    def edge_facts_sync(self, pairs: list[str]) -> dict[str, tuple[tuple[str, ...], str, str, int]]: ...

    def incident_sync(self, keys: list[str]) -> list[Incident]: ...

    def incident_pairs_sync(self, keys: list[str]) -> list[str]: ...

    def pairs_among_sync(self, keys: list[str]) -> list[str]: ...

    def neighbourhood_sync(self, seeds: dict[str, float], *, hops: int, cap: int,
                           edge_cap: int | None = None) -> list[tuple[str, str]]: ...

    def pagerank_sync(self, seeds: dict[str, float], edges: list[tuple[str, str]], weights: list[float], *,
                      damping: float, limit: int) -> list[tuple[str, float]]: ...


class RetrievalSource(RetrievalReads, Protocol):
    """The store as the retriever holds it: the reads, and what a metadata filter's view of it is
    made from (``proxy/retrieval/scope.py``, ``scoped_store.py``)."""

    @property
    def shared(self) -> bool:
        """Other replicas share the store: its searches run on the database server, side by side."""
        ...

    @property
    def metadata_version(self) -> int: ...

    async def searchable_metadata(self) -> list[tuple[str, dict[str, Any]]]: ...

    def scope_material_sync(self) -> ScopeMaterial: ...

    def within(self, scope: GraphScope) -> MemoryView:
        """The named graph reads as ``scope`` sees them."""
        ...

    def sources_sync(self, table: str, keys: list[int]) -> dict[int, tuple[str, tuple[str, ...]]]: ...

    def extractions_sync(self, chunk_ids: list[str]) -> dict[str, str]: ...

    def aliases_sync(self) -> dict[str, str]: ...
