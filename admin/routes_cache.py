"""Console pages for the LLM cache: per kind the count, size and hits; a kind's entries (searched,
paged); one entry's request and response; deleting an entry and clearing a kind (confirmed)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from proxy.core.errors import NotFound
from proxy.rag_api.routes_documents import knowledge
from proxy.store.duckdb.connection import Con

from admin.guard import action
from admin.paging import page_of
from admin.rendering import is_htmx, render, unref

# the kinds as stored, and how the console names them
KINDS = {"extract": "extraction", "summary": "summary", "keywords": "keywords", "answer": "answer"}
PER_PAGE = 50
ROWS_TARGET = "cache-rows"
ENTRY_COLUMNS = ("key", "model", "hits", "kb_version", "created_at", "last_hit_at", "size")

# entries matching $q (all of them when $q is NULL): a case-insensitive substring, its % _ \ taken
# literally (ILIKE scans the texts about twice as fast as contains(lower(...)))
_MATCHES = """kind = $kind AND ($q IS NULL OR key ILIKE $q ESCAPE '\\' OR model ILIKE $q ESCAPE '\\'
              OR request ILIKE $q ESCAPE '\\' OR response ILIKE $q ESCAPE '\\')"""


def _pattern(search: str | None) -> str | None:
    if not search:
        return None
    return "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def kind_summary(con: Con) -> dict[str, dict[str, int]]:
    rows = con.execute("""SELECT kind, count(*), coalesce(sum(strlen(request) + strlen(response)), 0),
                                 coalesce(sum(hits), 0)
                          FROM llm_cache GROUP BY kind""").fetchall()
    found = {kind: {"count": n, "size": size, "hits": hits} for kind, n, size, hits in rows}
    return {kind: found.get(kind, {"count": 0, "size": 0, "hits": 0}) for kind in KINDS}


def list_entries(con: Con, kind: str, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    params = {"kind": kind, "q": _pattern(search)}
    # one scan for the page and the total (a search reads every request and response)
    rows = con.execute(f"""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                  strlen(request) + strlen(response), count(*) OVER ()
                           FROM llm_cache WHERE {_MATCHES}
                           ORDER BY created_at DESC, key LIMIT $limit OFFSET $offset""",
                       {**params, "limit": limit, "offset": offset}).fetchall()
    if rows:
        total = rows[0][-1]
    else:
        total = con.execute(f"SELECT count(*) FROM llm_cache WHERE {_MATCHES}", params).fetchone()[0]
    return [dict(zip(ENTRY_COLUMNS, row[:-1], strict=True)) for row in rows], total


def get_entry(con: Con, kind: str, key: str) -> dict[str, Any] | None:
    row = con.execute("""SELECT key, model, hits, kb_version, created_at, last_hit_at,
                                strlen(request) + strlen(response), request, response
                         FROM llm_cache WHERE kind = ? AND key = ?""", [kind, key]).fetchone()
    return dict(zip((*ENTRY_COLUMNS, "request", "response"), row, strict=True)) if row else None


def kind_count(con: Con, kind: str) -> int:
    return con.execute("SELECT count(*) FROM llm_cache WHERE kind = ?", [kind]).fetchone()[0]


def delete_entry(con: Con, kind: str, key: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = ? AND key = ?", [kind, key])


def clear_kind(con: Con, kind: str) -> None:
    con.execute("DELETE FROM llm_cache WHERE kind = ?", [kind])


def pretty(text: str) -> str:
    """JSON indented for reading; anything else as it is."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, (dict, list)):
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def kind_of(request: Request) -> str:
    kind = request.path_params["kind"]
    if kind not in KINDS:
        raise NotFound(f"there is no cache kind {kind!r}: the kinds are {', '.join(KINDS)}")
    return kind


async def cache_page(request: Request) -> Response:
    kinds = await knowledge(request).store.db.read(kind_summary)
    return render(request, "cache.html", {"kinds": kinds, "labels": KINDS,
                                          "total": sum(k["count"] for k in kinds.values())})


async def kind_page(request: Request) -> Response:
    kb = knowledge(request)
    kind = kind_of(request)
    search = (request.query_params.get("q") or "").strip()[:200]
    page = page_of(request, size=PER_PAGE)
    entries, total = await kb.store.db.read(list_entries, kind, search or None, page.size, page.offset)
    context = {"kind": kind, "label": KINDS[kind], "entries": entries, "q": search,
               "page": page.with_total(total), "rows_target": ROWS_TARGET}
    if is_htmx(request) and request.headers.get("hx-target") == ROWS_TARGET:
        return render(request, "_cache_rows.html", context)
    return render(request, "cache_kind.html", context)


async def _entry(request: Request) -> tuple[str, dict[str, Any]]:
    kind = kind_of(request)
    key = unref(request.path_params["key"])
    entry = await knowledge(request).store.db.read(get_entry, kind, key)
    if entry is None:
        raise NotFound(f"no {KINDS[kind]} cache entry with that key (it may have been deleted)")
    return kind, entry


async def entry_page(request: Request) -> Response:
    kind, entry = await _entry(request)
    return render(request, "cache_entry.html", {"kind": kind, "label": KINDS[kind], "entry": entry,
                                                "request_text": pretty(entry["request"]),
                                                "response_text": pretty(entry["response"])})


@action
async def delete(request: Request) -> Response:
    kind = kind_of(request)
    key = unref(request.path_params["key"])
    await knowledge(request).store.db.write(delete_entry, kind, key)  # already gone: nothing to do
    return RedirectResponse(f"/admin/cache/{kind}", status_code=303)


async def confirm_clear(request: Request) -> Response:
    kind = kind_of(request)
    count = await knowledge(request).store.db.read(kind_count, kind)
    return render(request, "cache_clear.html", {"kind": kind, "label": KINDS[kind], "count": count})


@action
async def clear(request: Request) -> Response:
    kind = kind_of(request)
    await knowledge(request).store.db.write(clear_kind, kind)
    return RedirectResponse("/admin/cache", status_code=303)


ROUTES = [
    Route("/cache", cache_page, methods=["GET"]),
    Route("/cache/{kind}", kind_page, methods=["GET"]),
    # before "/cache/{kind}/{key}": "clear" is never a key's reference (those never have 5 characters)
    Route("/cache/{kind}/clear", confirm_clear, methods=["GET"]),
    Route("/cache/{kind}/clear", clear, methods=["POST"]),
    Route("/cache/{kind}/{key}", entry_page, methods=["GET"]),
    Route("/cache/{kind}/{key}/delete", delete, methods=["POST"]),
]
