"""One document into the knowledge base from bytes, as an upload does it: bounded, parsed in a
worker process (``parse_isolated``), then stored and queued by ``knowledge.documents.submit``.
Shared by the surfaces that take documents by value rather than as multipart uploads (the MCP
tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.core.errors import PayloadTooLarge
from proxy.core.settings_sections import ParsingSettings
from proxy.parsing.workers import parse_isolated

if TYPE_CHECKING:
    from proxy.knowledge.service import Knowledge


async def add_document(knowledge: Knowledge, settings: ParsingSettings, name: str, data: bytes,
                       metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parse and queue one document: ``{"name", "outcome", "id", "status"}`` (and ``duplicate_of``
    for a duplicate, ``waiting`` with the reason for one the pipeline holds back), the outcome
    being "accepted", "replaced" (a new version of the document of
    that name) or "duplicate". A file that cannot be taken raises its GraphGateError (400, 413, 415)."""
    if len(data) > settings.max_upload_bytes:
        raise PayloadTooLarge(f"file '{name}' exceeds the limit of {settings.max_upload_bytes} bytes")
    parsed = await parse_isolated(name, data, settings, owner=knowledge.kb)   # shared fairly between bases
    document, outcome = await knowledge.documents.submit(parsed, metadata=metadata)
    result = {"name": parsed.name, "outcome": outcome, "id": document["id"], "status": document["status"]}
    if outcome == "duplicate":
        result["duplicate_of"] = document["name"]
    if document["status"] == "pending" and document.get("error"):   # held back (pipeline gate): why
        result["waiting"] = document["error"]
    return result
