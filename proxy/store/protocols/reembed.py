"""Each vector table's embedding model, and re-embedding everything for a new one (``graphgate
reindex``, proxy/knowledge/reindex.py). A backend implements ``ReembedTables``.

A re-embedding never mixes two models in a table: the new vectors are staged beside the rows
(the ``reembedding`` table), a batch a transaction, so that a run killed half-way resumes with
the rows not staged yet; once every row has one, ``swap`` puts them in, with new vector keys,
for every table in one transaction (proxy/store/vector_models.py says why the community
summaries are dropped instead). A row whose text changed after its vector was staged (another
replica committed meanwhile) is staged again: a staged vector carries the row's ``source`` (its
embed hash then; a chunk's id is its content's hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from proxy.store.vector_models import TableModel


@dataclass(frozen=True)
class ToEmbed:
    """A row whose vector is still to be made: its id, what its current vector was made from
    (``source``), and the fields its text is made of (chunks: content; entities: name,
    description; relations: keywords, source name, target name, description)."""
    id: str
    source: str
    fields: tuple[Any, ...]


class ReembedTables(Protocol):
    async def models(self) -> dict[str, TableModel]:
        """Every vector table's recorded model and dimension."""

    async def to_embed(self, table: str, model: str, after: str | None, limit: int) -> list[ToEmbed]:
        """Up to ``limit`` rows of ``table`` (chunks, entities or relations) with no current vector
        staged for ``model``, in id order, past ``after`` when given."""

    async def progress(self, table: str, model: str) -> tuple[int, int]:
        """(rows with a current vector staged for ``model``, rows) of ``table``."""

    async def staged_models(self) -> dict[str, int]:
        """Vectors staged per model (a re-embedding under way, or one that was interrupted)."""

    async def discard_staged(self, keep: str | None, dim: int | None = None) -> int:
        """Drop the staged vectors of every model but ``keep`` (all of them when None), and those of
        ``keep`` of another dimension than ``dim``; how many went."""

    async def stage(self, table: str, model: str, rows: list[ToEmbed], vectors: np.ndarray,
                    hashes: list[str] | None) -> None:
        """New vectors for ``rows`` of ``table``, made by ``model``, with the embed hashes the rows
        take once they are swapped in (entities and relations; None for chunks). One transaction."""

    async def swap(self, model: str, dim: int) -> bool:
        """In one transaction: every row of the re-embedded tables takes its staged vector under a
        new vector key (and its new embed hash), the community summaries are dropped, every vector
        table records ``model`` and ``dim``, and the generation moves on. False (nothing changed)
        when a row has no current staged vector (committed after it was staged)."""
