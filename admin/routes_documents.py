"""Console pages for documents: upload (with metadata for every file), the live table (filtered by
name, status and a metadata filter), a document's chunks and what each yielded, its metadata and
their editing, retry and delete (with a confirmation that says what will go)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.paging import page_of
from admin.rendering import counted, is_htmx, render
from proxy.actions.uploads import submit_uploads
from proxy.core.errors import BadRequest, NotFound
from proxy.core.metadata import parse_filter
from proxy.knowledge.documents import STATUSES
from proxy.state import knowledge

SORTS = {"created_at": "Added", "name": "Name", "status": "Status", "size": "Size", "chunks_total": "Chunks",
         "updated_at": "Updated"}
CHUNKS_PER_PAGE = 10


async def documents_page(request: Request) -> Response:
    kb = await knowledge(request)
    params = request.query_params
    status = params.get("status") or None
    kb.documents.check_status(status)
    sort = params.get("sort") or ""
    sort = sort if sort in SORTS else "created_at"
    order = "asc" if params.get("order") == "asc" else "desc"
    search = (params.get("q") or "").strip()[:200]
    filter_text = (params.get("filter") or "").strip()
    page = page_of(request, size=50)
    rows: list[dict[str, Any]] = []
    total, filter_error = 0, None
    try:
        where = parse_filter(filter_text or None, where="the filter")
    except BadRequest as exc:  # said beside the table (the page stays usable), with a 400
        filter_error = exc.message
    else:
        rows, total = await kb.documents.page(status=status, search=search or None, sort=sort,
                                              descending=order == "desc", limit=page.size, offset=page.offset,
                                              where=where)
    counts = await kb.documents.entity_counts([r["id"] for r in rows])
    context = {"documents": rows, "entity_counts": counts, "page": page.with_total(total), "status": status,
               "sort": sort, "order": order, "q": search, "filter": filter_text, "filter_error": filter_error,
               "sorts": SORTS, "statuses": STATUSES,
               "active": any(r["status"] in ("pending", "processing") for r in rows)}
    code = 400 if filter_error else 200
    if is_htmx(request) and request.headers.get("hx-target") == "document-table":
        return render(request, "_document_table.html", context, status=code)
    return render(request, "documents.html", context, status=code)


@action
async def upload(request: Request) -> Response:
    results = await submit_uploads(request)
    if is_htmx(request):
        return render(request, "_upload_results.html", {"results": results, "standalone": False})
    # posted before htmx ran (or without scripts): a page of its own, with no documents table to refresh
    return render(request, "upload_done.html", {"results": results, "standalone": True},
                  status=200 if any(r["outcome"] != "rejected" for r in results) else results[0]["status_code"])


async def document_page(request: Request) -> Response:
    kb = await knowledge(request)
    document = await kb.documents.get(request.path_params["id"])
    counts = await kb.documents.counts(document["id"])
    if is_htmx(request) and request.headers.get("hx-target") == "document-status":
        return render(request, "_document_status.html", {"document": document, "counts": counts})
    return render(request, "document.html", await _document_context(request, document, counts))


async def _document_context(request: Request, document: dict[str, Any], counts: dict[str, Any], *,
                            metadata_text: str | None = None, metadata_error: str | None = None) -> dict[str, Any]:
    """What document.html shows; after a refused metadata edit, the text as typed and why."""
    page = page_of(request, size=CHUNKS_PER_PAGE)
    chunks, total = await (await knowledge(request)).documents.chunks(document["id"], page.size, page.offset)
    if metadata_text is None:
        metadata_text = pretty_json(document["metadata"]) if document["metadata"] else ""
    return {"document": document, "chunks": chunks, "page": page.with_total(total), "counts": counts,
            "metadata_text": metadata_text, "metadata_error": metadata_error}


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@action
async def save_metadata(request: Request) -> Response:
    """The edit form's JSON replaces the document's metadata whole (blank: none). Refused text is
    shown again with the reason, and nothing changes."""
    kb = await knowledge(request)
    field = (await request.form()).get("metadata")
    text = field if isinstance(field, str) else ""
    try:
        document = await kb.documents.set_metadata(request.path_params["id"], text)
    except BadRequest as exc:
        document = await kb.documents.get(request.path_params["id"])
        context = await _document_context(request, document, await kb.documents.counts(document["id"]),
                                          metadata_text=text, metadata_error=exc.message)
        return render(request, "document.html", context, status=400)
    return flash.redirect(request, f"/admin/documents/{document['id']}", "Saved the metadata.")


@action
async def retry(request: Request) -> Response:
    document = await (await knowledge(request)).documents.retry(request.path_params["id"])
    return flash.redirect(request, f"/admin/documents/{document['id']}", "Queued the document again.")


async def confirm_delete(request: Request) -> Response:
    kb = await knowledge(request)
    document = await kb.documents.get(request.path_params["id"])
    effects = await kb.documents.deletion_effects(document["id"])
    return render(request, "document_delete.html", {"document": document, "effects": effects})


@action
async def delete(request: Request) -> Response:
    kb = await knowledge(request)
    try:
        gone = await kb.documents.delete(request.path_params["id"])
    except NotFound:   # already gone: the table is what the user wants to see either way
        return flash.redirect(request, "/admin/documents", "The document was deleted already.")
    removed = [counted(gone["chunks_removed"], "chunk"), counted(gone["entities_removed"], "entity", "entities"),
               counted(gone["relations_removed"], "relation")]
    return flash.redirect(request, "/admin/documents", f"Deleted the document “{gone['document']['name']}” "
                          f"({', '.join(removed[:2])} and {removed[2]} removed with it).")


ROUTES = [
    Route("/documents", documents_page, methods=["GET"]),
    Route("/documents", upload, methods=["POST"]),
    Route("/documents/{id}", document_page, methods=["GET"]),
    Route("/documents/{id}/metadata", save_metadata, methods=["POST"]),
    Route("/documents/{id}/retry", retry, methods=["POST"]),
    Route("/documents/{id}/delete", confirm_delete, methods=["GET"]),
    Route("/documents/{id}/delete", delete, methods=["POST"]),
]
