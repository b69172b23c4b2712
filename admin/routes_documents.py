"""Console pages for documents: upload, the live table, a document's chunks and what each yielded,
retry and delete (with a confirmation that says what will go)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin.guard import action
from admin.paging import page_of
from admin.rendering import is_htmx, render
from proxy.core.errors import NotFound
from proxy.knowledge.documents import STATUSES
from proxy.rag_api.routes_documents import submit_uploads
from proxy.state import knowledge

SORTS = {"created_at": "Added", "name": "Name", "status": "Status", "size": "Size", "chunks_total": "Chunks",
         "updated_at": "Updated"}
CHUNKS_PER_PAGE = 10


async def documents_page(request: Request) -> Response:
    kb = knowledge(request)
    params = request.query_params
    status = params.get("status") or None
    kb.documents.check_status(status)
    sort = params.get("sort") or ""
    sort = sort if sort in SORTS else "created_at"
    order = "asc" if params.get("order") == "asc" else "desc"
    search = (params.get("q") or "").strip()[:200]
    page = page_of(request, size=50)
    rows, total = await kb.documents.page(status=status, search=search or None, sort=sort,
                                          descending=order == "desc", limit=page.size, offset=page.offset)
    counts = await kb.documents.entity_counts([r["id"] for r in rows])
    context = {"documents": rows, "entity_counts": counts, "page": page.with_total(total), "status": status,
               "sort": sort, "order": order, "q": search, "sorts": SORTS, "statuses": STATUSES,
               "active": any(r["status"] in ("pending", "processing") for r in rows)}
    if is_htmx(request) and request.headers.get("hx-target") == "document-table":
        return render(request, "_document_table.html", context)
    return render(request, "documents.html", context)


@action
async def upload(request: Request) -> Response:
    results = await submit_uploads(request)
    if is_htmx(request):
        return render(request, "_upload_results.html", {"results": results})
    return render(request, "upload_done.html", {"results": results},
                  status=200 if any(r["outcome"] != "rejected" for r in results) else results[0]["status_code"])


async def document_page(request: Request) -> Response:
    kb = knowledge(request)
    document = await kb.documents.get(request.path_params["id"])
    counts = await kb.documents.counts(document["id"])
    if is_htmx(request) and request.headers.get("hx-target") == "document-status":
        return render(request, "_document_status.html", {"document": document, "counts": counts})
    page = page_of(request, size=CHUNKS_PER_PAGE)
    chunks, total = await kb.documents.chunks(document["id"], page.size, page.offset)
    context = {"document": document, "chunks": chunks, "page": page.with_total(total), "counts": counts}
    return render(request, "document.html", context)


@action
async def retry(request: Request) -> Response:
    document = await knowledge(request).documents.retry(request.path_params["id"])
    return RedirectResponse(f"/admin/documents/{document['id']}", status_code=303)


async def confirm_delete(request: Request) -> Response:
    kb = knowledge(request)
    document = await kb.documents.get(request.path_params["id"])
    effects = await kb.documents.deletion_effects(document["id"])
    return render(request, "document_delete.html", {"document": document, "effects": effects})


@action
async def delete(request: Request) -> Response:
    kb = knowledge(request)
    try:
        await kb.documents.delete(request.path_params["id"])
    except NotFound:
        pass  # already gone: the table is what the user wants to see either way
    return RedirectResponse("/admin/documents", status_code=303)


ROUTES = [
    Route("/documents", documents_page, methods=["GET"]),
    Route("/documents", upload, methods=["POST"]),
    Route("/documents/{id}", document_page, methods=["GET"]),
    Route("/documents/{id}/retry", retry, methods=["POST"]),
    Route("/documents/{id}/delete", confirm_delete, methods=["GET"]),
    Route("/documents/{id}/delete", delete, methods=["POST"]),
]
