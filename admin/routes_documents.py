"""Console pages for documents: upload, the live table, a document's chunks and what each yielded,
retry and delete (with a confirmation that says what will go)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from proxy.core.errors import BadRequest, NotFound
from proxy.ingest import documents as sql
from proxy.extraction.results import ExtractionResult
from proxy.rag_api.routes_documents import knowledge, submit_uploads
from proxy.store.duckdb.connection import Con

from admin.guard import action
from admin.paging import page_of
from admin.rendering import is_htmx, render

SORTS = {"created_at": "Added", "name": "Name", "status": "Status", "size": "Size", "chunks_total": "Chunks",
         "updated_at": "Updated"}
CHUNKS_PER_PAGE = 10


def entity_counts(con: Con, document_ids: list[str]) -> dict[str, int]:
    """Entities per document for one page of the table, in one query (a join on unnested source
    ids: ``list_has_any`` against every entity costs seconds at 100k entities)."""
    if not document_ids:
        return {}
    rows = con.execute("""
        WITH links AS (SELECT DISTINCT document_id, chunk_id FROM document_chunks
                       WHERE document_id IN (SELECT unnest($ids::VARCHAR[]))),
             sourced AS (SELECT name_key, unnest(source_ids) AS chunk_id FROM entities)
        SELECT l.document_id, count(DISTINCT s.name_key) FROM links l JOIN sourced s USING (chunk_id)
        GROUP BY 1""", {"ids": document_ids}).fetchall()
    return dict(rows)


def document_chunks(con: Con, document_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    total = con.execute("SELECT count(*) FROM document_chunks WHERE document_id = ?", [document_id]).fetchone()[0]
    rows = con.execute("""
        WITH page AS (SELECT ord, chunk_id FROM document_chunks WHERE document_id = ? ORDER BY ord LIMIT ? OFFSET ?)
        SELECT p.ord, p.chunk_id, c.content, c.tokens, e.result FROM page p
        LEFT JOIN chunks c ON c.id = p.chunk_id LEFT JOIN extractions e ON e.chunk_id = p.chunk_id
        ORDER BY p.ord""", [document_id, limit, offset]).fetchall()
    out = []
    for order, chunk_id, content, tokens, result in rows:
        extracted = ExtractionResult.from_json(result) if result else None
        out.append({"ord": order, "id": chunk_id, "content": content, "tokens": tokens,
                    "entities": extracted.entities if extracted else [],
                    "relations": extracted.relations if extracted else []})
    return out, total


def deletion_effects(con: Con, document_id: str) -> dict[str, int]:
    """What deleting the document would remove and what it would only update."""
    orphaned = sql.orphaned_chunks(con, document_id, [])
    counts = {"chunks": len(orphaned)}
    for table, key in (("entities", "name_key"), ("relations", "pair_key")):
        removed, updated = con.execute(f"""
            WITH gone AS (SELECT DISTINCT unnest($gone::VARCHAR[]) AS chunk_id),
                 sourced AS (SELECT {key} AS id, unnest(source_ids) AS chunk_id FROM {table}),
                 per AS (SELECT s.id, count(*) AS total, count(g.chunk_id) AS hit
                         FROM sourced s LEFT JOIN gone g USING (chunk_id) GROUP BY s.id)
            SELECT count(*) FILTER (WHERE hit = total), count(*) FILTER (WHERE hit < total)
            FROM per WHERE hit > 0""", {"gone": orphaned}).fetchone()
        counts[f"{table}_removed"], counts[f"{table}_updated"] = removed, updated
    return counts


async def documents_page(request: Request) -> Response:
    kb = knowledge(request)
    params = request.query_params
    status = params.get("status") or None
    if status is not None and status not in sql.STATUSES:
        raise BadRequest(f"status must be one of {', '.join(sql.STATUSES)}")
    sort = params.get("sort") if params.get("sort") in SORTS else "created_at"
    order = "asc" if params.get("order") == "asc" else "desc"
    search = (params.get("q") or "").strip()[:200]
    page = page_of(request, size=50)
    rows, total = await kb.store.db.read(
        lambda con: sql.list_documents(con, status=status, search=search or None, sort=sort,
                                       descending=order == "desc", limit=page.size, offset=page.offset))
    rows = [kb.pipeline.as_known(r) for r in rows]
    counts = await kb.store.db.read(entity_counts, [r["id"] for r in rows])
    context = {"documents": rows, "entity_counts": counts, "page": page.with_total(total), "status": status,
               "sort": sort, "order": order, "q": search, "sorts": SORTS, "statuses": sql.STATUSES,
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
    document = await kb.pipeline.get(request.path_params["id"])
    counts = await kb.store.db.read(sql.document_counts, document["id"])
    if is_htmx(request) and request.headers.get("hx-target") == "document-status":
        return render(request, "_document_status.html", {"document": document, "counts": counts})
    page = page_of(request, size=CHUNKS_PER_PAGE)
    chunks, total = await kb.store.db.read(document_chunks, document["id"], page.size, page.offset)
    context = {"document": document, "chunks": chunks, "page": page.with_total(total), "counts": counts}
    return render(request, "document.html", context)


@action
async def retry(request: Request) -> Response:
    document = await knowledge(request).pipeline.retry(request.path_params["id"])
    return RedirectResponse(f"/admin/documents/{document['id']}", status_code=303)


async def confirm_delete(request: Request) -> Response:
    kb = knowledge(request)
    document = await kb.pipeline.get(request.path_params["id"])
    effects = await kb.store.db.read(deletion_effects, document["id"])
    return render(request, "document_delete.html", {"document": document, "effects": effects})


@action
async def delete(request: Request) -> Response:
    kb = knowledge(request)
    try:
        await kb.pipeline.delete(request.path_params["id"])
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
