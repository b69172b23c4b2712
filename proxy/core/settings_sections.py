"""The sections of the settings each component reads: views of the one settings table
(``settings.py``), so that a component is handed, and may read, only what it needs.

Each section is a protocol of read-only fields; ``Settings`` is every section at once (the type
checker holds it to each), and every field of a section is a row of ``SETTINGS``: the import fails,
naming the field, when one is not. A component that hands its settings on to another's reads the
other's section too (its section derives from it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, get_type_hints

from proxy.core.settings import SETTINGS_BY_NAME


class ParsingSettings(Protocol):
    """The bounded worker processes that parse uploads (proxy/parsing/)."""

    @property
    def max_upload_bytes(self) -> int: ...
    @property
    def parse_seconds(self) -> float: ...
    @property
    def parse_memory(self) -> int: ...


class ExtractionSettings(Protocol):
    """Entities and relations from a chunk (proxy/extraction/)."""

    @property
    def entity_types(self) -> tuple[str, ...]: ...
    @property
    def gleaning(self) -> int: ...
    @property
    def language(self) -> str: ...
    @property
    def llm_retries(self) -> int: ...


class MergingSettings(Protocol):
    """Merging extraction results into the graph (proxy/merging/)."""

    @property
    def embed_model(self) -> str: ...
    @property
    def entity_resolution(self) -> bool: ...
    @property
    def language(self) -> str: ...
    @property
    def summary_fragments(self) -> int: ...
    @property
    def summary_tokens(self) -> int: ...


class IngestSettings(ParsingSettings, ExtractionSettings, MergingSettings, Protocol):
    """The document pipeline (proxy/ingest/), which hands its settings to parsing, extraction and merging."""

    @property
    def chunk_tokens(self) -> int: ...
    @property
    def chunk_overlap(self) -> int: ...
    @property
    def parallel_documents(self) -> int: ...
    @property
    def ingest_lease_seconds(self) -> float: ...


class UpstreamSettings(Protocol):
    """The upstream Ollama: the client, the pool, GraphGate's own model calls, the watcher (proxy/upstream/)."""

    @property
    def upstream(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def read_timeout(self) -> float: ...
    @property
    def discovery_timeout(self) -> float: ...
    @property
    def llm_model(self) -> str | None: ...
    @property
    def embed_model(self) -> str: ...
    @property
    def embed_batch(self) -> int: ...
    @property
    def llm_retries(self) -> int: ...
    @property
    def keyword_model(self) -> str | None: ...
    @property
    def keywords(self) -> str: ...


class AccessSettings(Protocol):
    """Who may pass: Host names, CORS, keys, body bounds, console sessions (proxy/guards/)."""

    @property
    def allowed_hosts(self) -> tuple[str, ...]: ...
    @property
    def host(self) -> str: ...
    @property
    def cors_origins(self) -> tuple[str, ...]: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def metrics_require_key(self) -> bool: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def max_upload_bytes(self) -> int: ...
    @property
    def admin_password(self) -> str | None: ...
    @property
    def session_hours(self) -> float: ...
    @property
    def session_secret(self) -> str | None: ...
    @property
    def data_dir(self) -> Path: ...


SECTIONS: tuple[type, ...] = (ParsingSettings, ExtractionSettings, MergingSettings, IngestSettings, UpstreamSettings,
                              AccessSettings)


def section_fields(section: type) -> list[str]:
    """The fields a section reads (its own and those of the sections it derives from)."""
    return [name for name in dir(section) if isinstance(getattr(section, name, None), property)]


def unknown_fields(sections: tuple[type, ...]) -> list[str]:
    """``Section.field`` for each field of ``sections`` that the settings table has no row for."""
    found = []
    for section in sections:
        get_type_hints(section)   # the annotations resolve
        found += [f"{section.__name__}.{name}" for name in section_fields(section) if name not in SETTINGS_BY_NAME]
    return found


if unknown := unknown_fields(SECTIONS):
    raise ImportError(f"{', '.join(unknown)}: no row of the settings table (proxy/core/settings.py SETTINGS) "
                      "has this name")
