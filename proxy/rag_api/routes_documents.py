"""The ``/rag`` JSON API for scripts, the CLI and tests: documents, pipeline and store statistics."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.actions.uploads import json_metadata, submit_uploads
from proxy.core.errors import BadRequest
from proxy.core.metadata import parse_filter
from proxy.core.payloads import parse_object, read_body
from proxy.core.responses import json_response
from proxy.state import knowledge


async def upload(request: Request) -> Response:
    results = await submit_uploads(request)
    if all(r["outcome"] == "rejected" for r in results):
        first = results[0]
        return json_response({"error": first["error"], "documents": results}, first["status_code"])
    accepted = any(r["outcome"] in ("accepted", "replaced") for r in results)
    return json_response({"documents": results}, 202 if accepted else 200)


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}")
    return value


async def list_documents(request: Request) -> Response:
    kb = await knowledge(request)
    status = request.query_params.get("status") or None
    kb.documents.check_status(status)
    limit = _int_param(request, "limit", 50, 1, 1000)
    offset = _int_param(request, "offset", 0, 0, 10**9)
    rows, total = await kb.documents.page(status=status, search=request.query_params.get("search") or None,
                                          sort=request.query_params.get("sort", "created_at"),
                                          descending=request.query_params.get("order", "desc") != "asc",
                                          limit=limit, offset=offset,
                                          where=parse_filter(request.query_params.get("filter") or None,
                                                             where="filter"))
    return json_response({"documents": rows, "total": total, "limit": limit, "offset": offset})


async def get_document(request: Request) -> Response:
    kb = await knowledge(request)
    document = await kb.documents.get(request.path_params["id"])
    document["counts"] = await kb.documents.counts(document["id"])
    return json_response(document)


async def update_document(request: Request) -> Response:
    """``PATCH /rag/documents/{id}`` with ``{"metadata": {...}}``: the document's new metadata (whole)."""
    body = parse_object(await read_body(request, 64 * 1024))
    if "metadata" not in body or set(body) - {"metadata"}:
        raise BadRequest('expected {"metadata": {...}} (the only field a document can change)')
    return json_response(await (await knowledge(request)).documents.set_metadata(request.path_params["id"],
                                                                         json_metadata(body)))


async def delete_document(request: Request) -> Response:
    return json_response(await (await knowledge(request)).documents.delete(request.path_params["id"]))


async def retry_document(request: Request) -> Response:
    return json_response(await (await knowledge(request)).documents.retry(request.path_params["id"]), 202)


async def pipeline_status(request: Request) -> Response:
    return json_response((await knowledge(request)).documents.status())


async def stats(request: Request) -> Response:
    return json_response(await (await knowledge(request)).documents.stats())


ROUTES = [
    Route("/rag/documents", upload, methods=["POST"]),
    Route("/rag/documents", list_documents, methods=["GET"]),
    Route("/rag/documents/{id}", get_document, methods=["GET"]),
    Route("/rag/documents/{id}", delete_document, methods=["DELETE"]),
    Route("/rag/documents/{id}", update_document, methods=["PATCH"]),
    Route("/rag/documents/{id}/retry", retry_document, methods=["POST"]),
    Route("/rag/pipeline", pipeline_status, methods=["GET"]),
    Route("/rag/stats", stats, methods=["GET"]),
]
