"""Documents sent as a request (the /rag API's upload and the console's): read, checked and queued,
one result per file."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from proxy.actions.forms import read_form
from proxy.core.errors import BadRequest, GraphGateError, PayloadTooLarge
from proxy.core.metadata import check_metadata
from proxy.core.payloads import parse_object, read_body
from proxy.knowledge.intake import add_document
from proxy.state import knowledge, parsing_settings

MAX_FILES = 100


async def _uploaded(request: Request, limit: int) -> tuple[list[tuple[str, bytes | GraphGateError]], dict[str, Any]]:
    """(name, bytes or the reason it was refused) for each uploaded file or JSON text, and the
    metadata they all get (a ``metadata`` form field or JSON key; checked before anything is stored)."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await read_form(request, max_files=MAX_FILES, max_fields=MAX_FILES, max_part_size=1024 * 1024)
        files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
        if not files:
            raise BadRequest("no files in the upload (send them as multipart form fields)")
        field = form.get("metadata")
        metadata = check_metadata(field if isinstance(field, str) else None)
        out: list[tuple[str, bytes | GraphGateError]] = []
        for upload in files:
            data = await upload.read(limit + 1)
            name = upload.filename or ""
            out.append((name, PayloadTooLarge(f"file '{name}' exceeds the limit of {limit} bytes")
                        if len(data) > limit else data))
        await form.close()
        return out, metadata
    body = parse_object(await read_body(request, limit + 64 * 1024))
    given_name, text = body.get("name"), body.get("text")
    if not isinstance(given_name, str) or not isinstance(text, str):
        raise BadRequest('expected multipart files, or JSON {"name": "...", "text": "...", "metadata": {...}}')
    return [(given_name, text.encode())], check_metadata(json_metadata(body))


async def submit_uploads(request: Request) -> list[dict[str, Any]]:
    """Parse and queue every uploaded file; one result per file (accepted, replaced, duplicate or
    rejected with the reason and its status code)."""
    kb = await knowledge(request)
    settings = parsing_settings(request)
    results: list[dict[str, Any]] = []
    uploaded, metadata = await _uploaded(request, settings.max_upload_bytes)
    for name, data in uploaded:
        try:
            if isinstance(data, GraphGateError):
                raise data
            results.append(await add_document(kb, settings, name, data, metadata))  # parsed in a worker, bounded
        except GraphGateError as exc:
            results.append({"name": name, "outcome": "rejected", "error": exc.message, "status_code": exc.status})
    return results


def json_metadata(body: dict[str, Any]) -> dict[str, Any] | None:
    """A JSON body's ``metadata``: an object, or null for none (text is for form fields and flags)."""
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadRequest("metadata must be a JSON object (or null for none)")
    return metadata
