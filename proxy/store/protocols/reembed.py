"""Re-embedding everything for a new embedding model (``graphgate reindex``): the rows whose texts
are embedded, their new vectors, and the model recorded. A backend implements ``ReembedTables``."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class ReembedTables(Protocol):
    async def chunk_texts(self) -> list[tuple[str, str]]:
        """(id, content) of every chunk."""

    async def entity_texts(self) -> list[tuple[str, str, str]]:
        """(name key, name, description) of every entity."""

    async def relation_texts(self) -> list[tuple[str, list[str], str, str, str]]:
        """(pair key, keywords, source name, target name, description) of every relation."""

    async def store_vectors(self, table: str, ids: list[str], vectors: np.ndarray,
                            hashes: list[str] | None) -> None:
        """New vectors (each under a new vector key) for rows of ``table`` (chunks, entities or
        relations), with their embedding hashes (entities and relations)."""

    async def record_model(self, model: str, dim: int | None) -> None:
        """The model (and its dimension, when known) the stored vectors now come from; the
        generation moves on (the indexes are rebuilt afterwards)."""

    async def recorded_model(self) -> str | None: ...
