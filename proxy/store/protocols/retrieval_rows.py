"""What retrieval reads from the tables: the texts it does not keep in memory (descriptions of the
chosen entities and relations, contents of the chosen chunks). Blocking reads: retrieval's stages
run them in worker threads."""

from __future__ import annotations

from typing import Protocol


class RetrievalRows(Protocol):
    def descriptions_sync(self, table: str, wanted: list[tuple[int, str]]) -> dict[int, str]:
        """Descriptions of ``table``'s ("entities" or "relations") rows by vector key, for ``wanted``
        (vector key, name key or pair key) pairs; a row re-keyed since its key was read is found by
        its name or pair."""
        ...

    def chunk_texts_sync(self, keys: list[int]) -> dict[str, tuple[str, int]]:
        """Chunk id -> (content, tokens) of the chunks with these vector keys."""
        ...

    def extractions_sync(self, chunk_ids: list[str]) -> dict[str, str]:
        """Chunk id -> its extraction result (normalised ExtractionResult JSON): what each chunk
        alone says of its entities and relations (a filtered retrieval's descriptions)."""
        ...
