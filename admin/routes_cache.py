"""Console pages for the LLM cache: per kind the count, size and hits; a kind's entries (searched,
paged); one entry's request and response; deleting an entry and clearing a kind (confirmed)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.paging import page_of
from admin.rendering import counted, is_htmx, render, unref
from proxy.core import json_text
from proxy.core.errors import NotFound
from proxy.state import knowledge

# the kinds as stored, and how the console names them
KINDS = {"extract": "extraction", "summary": "summary", "keywords": "keywords", "answer": "answer"}
PER_PAGE = 50
ROWS_TARGET = "cache-rows"


def pretty(text: str) -> str:
    """JSON indented for reading; anything else (a model's reply too deep to read, too) as it is."""
    try:
        value = json_text.loads(text, max_depth=json_text.BODY_DEPTH)
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
    kinds = await (await knowledge(request)).cache.kinds()
    return render(request, "cache.html", {"kinds": kinds, "labels": KINDS,
                                          "total": sum(k.count for k in kinds.values())})


async def kind_page(request: Request) -> Response:
    kb = await knowledge(request)
    kind = kind_of(request)
    search = (request.query_params.get("q") or "").strip()[:200]
    page = page_of(request, size=PER_PAGE)
    entries, total = await kb.cache.entries(kind, search or None, page.size, page.offset)
    context = {"kind": kind, "label": KINDS[kind], "entries": entries, "q": search,
               "page": page.with_total(total), "rows_target": ROWS_TARGET}
    if is_htmx(request) and request.headers.get("hx-target") == ROWS_TARGET:
        return render(request, "_cache_rows.html", context)
    return render(request, "cache_kind.html", context)


async def _entry(request: Request) -> tuple[str, dict[str, Any]]:
    kind = kind_of(request)
    key = unref(request.path_params["key"])
    entry = await (await knowledge(request)).cache.entry(kind, key)
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
    await (await knowledge(request)).cache.delete(kind, key)  # already gone: nothing to do
    return flash.redirect(request, f"/admin/cache/{kind}", f"Deleted the {KINDS[kind]} cache entry.")


async def confirm_clear(request: Request) -> Response:
    kind = kind_of(request)
    count = await (await knowledge(request)).cache.count(kind)
    return render(request, "cache_clear.html", {"kind": kind, "label": KINDS[kind], "count": count})


@action
async def clear(request: Request) -> Response:
    kind = kind_of(request)
    cache = (await knowledge(request)).cache
    count = await cache.count(kind)
    await cache.clear(kind)
    return flash.redirect(request, "/admin/cache", f"Cleared the {KINDS[kind]} cache "
                          f"({counted(count, 'entry', 'entries')} removed).")


ROUTES = [
    Route("/cache", cache_page, methods=["GET"]),
    Route("/cache/{kind}", kind_page, methods=["GET"]),
    # before "/cache/{kind}/{key}": "clear" is never a key's reference (those never have 5 characters)
    Route("/cache/{kind}/clear", confirm_clear, methods=["GET"]),
    Route("/cache/{kind}/clear", clear, methods=["POST"]),
    Route("/cache/{kind}/{key}", entry_page, methods=["GET"]),
    Route("/cache/{kind}/{key}/delete", delete, methods=["POST"]),
]
