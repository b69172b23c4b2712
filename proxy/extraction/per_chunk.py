"""Asking the model for one chunk's entities and relations: the extraction call (retried while
its reply is not valid JSON), then the gleaning passes that ask only for what was missed. Each
pass, and their sum, is kept within what a chunk of its size may contribute (``capped``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.core.errors import GraphGateError
from proxy.core.language_setting import language_for
from proxy.core.limiter import Priority
from proxy.core.settings_sections import ExtractionSettings
from proxy.extraction.prompts import extraction_messages, extraction_schema, gleaning_messages
from proxy.extraction.results import (
    ExtractionFormatError,
    ExtractionResult,
    capped,
    merge_passes,
    parse_extraction,
)
from proxy.parsing.chunking import Chunk
from proxy.upstream.model_calls import CacheEntry, ModelClient

log = logging.getLogger("graphgate.ingest")


class ExtractionFailed(GraphGateError):
    status = 502


@dataclass
class ChunkExtraction:
    result: ExtractionResult
    raw: list[str] = field(default_factory=list)             # every reply, as sent: stored with the result
    entries: list[CacheEntry] = field(default_factory=list)  # new LLM cache entries
    hits: list[CacheEntry] = field(default_factory=list)     # cache entries answered again


async def extract_chunk(models: ModelClient, settings: ExtractionSettings, chunk: Chunk, *,
                        save: Callable[[CacheEntry], object] | None = None, resumed: bool = False) -> ChunkExtraction:
    """``save`` is handed each answered reply that another call will follow (the first pass when
    gleaning is on, every gleaning pass but the last), at once: committed to the LLM cache, it is
    not lost to a crash before the chunk's record is stored. ``resumed`` (a document begun before:
    after a restart, a retry) looks those replies up first, so a kill repeats at most the calls in
    flight."""
    # written in the chunk's own language unless the setting names one (not translated into English)
    types, language = settings.entity_types, language_for(settings.language, chunk.content)
    schema = extraction_schema()
    messages = extraction_messages(chunk.content, entity_types=types, language=language)
    raw: list[str] = []
    entries: list[CacheEntry] = []
    hits: list[CacheEntry] = []
    result = None
    for attempt in range(1, settings.llm_retries + 1):
        # a new document needs no cache lookup: the extractions table already guarantees a chunk is
        # never extracted twice; a resumed one may find a first pass answered before a crash
        reply = await models.structured("extract", messages, schema, priority=Priority.INGEST,
                                        lookup=resumed and settings.gleaning > 0)
        raw.append(reply.content)
        try:
            result = capped(parse_extraction(reply.content, entity_types=types), chunk.tokens)
        except ExtractionFormatError as exc:
            log.warning("extraction reply for chunk %s was not valid JSON (try %d): %s", chunk.id, attempt, exc)
            error = exc
            continue
        (hits if reply.cached else entries).append(reply.entry)
        if save is not None and not reply.cached and settings.gleaning > 0:
            save(reply.entry)
        break
    if result is None:
        raise ExtractionFailed(f"the model's extraction for chunk {chunk.order + 1} was not valid JSON after "
                               f"{settings.llm_retries} tries: {error}")
    for gleaning in range(1, settings.gleaning + 1):
        reply = await models.structured("extract", gleaning_messages(
            chunk.content, result, entity_types=types, language=language), schema, priority=Priority.INGEST,
            lookup=resumed)
        raw.append(reply.content)
        try:
            extra = capped(parse_extraction(reply.content, entity_types=types), chunk.tokens)
        except ExtractionFormatError as exc:
            log.warning("gleaning reply for chunk %s was not valid JSON; keeping the first pass: %s", chunk.id, exc)
            break
        (hits if reply.cached else entries).append(reply.entry)
        if save is not None and not reply.cached and gleaning < settings.gleaning:
            save(reply.entry)
        if extra.is_empty():
            break
        result = capped(merge_passes(result, extra), chunk.tokens)
    return ChunkExtraction(result, raw, entries, hits)
