"""Console pages for chats: the recent turns' traces (what was asked, which mode, whether and what
was injected) and one turn in full."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin.paging import page_of
from admin.rendering import render
from proxy.core import json_text
from proxy.core.errors import BadRequest, NotFound
from proxy.state import knowledge

PER_PAGE = 50


def parse_detail(raw: Any) -> dict[str, Any]:
    """The detail JSON as a dict; anything unreadable is kept under "raw" rather than failing the page."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json_text.loads(raw, max_depth=json_text.BODY_DEPTH) if isinstance(raw, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"raw": raw}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _names(values: Any) -> list[str]:
    """Entity names or relation pairs, from either trace shape (plain names/pairs, or dicts)."""
    out = []
    for v in values if isinstance(values, list) else []:
        if isinstance(v, dict):
            if "source" in v and "target" in v:
                out.append(f"{v['source']} — {v['target']}")
            else:
                out.append(str(v.get("name") or v.get("id") or v))
        elif isinstance(v, list | tuple):
            out.append(" — ".join(str(x) for x in v))
        else:
            out.append(str(v))
    return out


def summarise(detail: dict[str, Any]) -> dict[str, Any]:
    """The parts of a trace's detail the pages show as tables and lists; absent parts come out empty."""
    keywords = _mapping(detail.get("keywords"))
    return {
        "tokens": {k: v for k, v in _mapping(detail.get("tokens")).items() if v is not None},
        "timings": _mapping(detail.get("timings")),
        "budget": {k: v for k, v in _mapping(detail.get("budget")).items() if v is not None},
        "high_level": [str(k) for k in keywords.get("high_level") or []],
        "low_level": [str(k) for k in keywords.get("low_level") or []],
        "keyword_source": keywords.get("source"),
        "entities": _names(detail.get("entities")),
        "relations": _names(detail.get("relations")),
        "chunks": _names(detail.get("chunks")),
    }


async def chats_page(request: Request) -> Response:
    kb = await knowledge(request)
    page = page_of(request, size=PER_PAGE)
    total = await kb.traces.count()
    rows = await kb.traces.recent(page.size, page.offset) if total > page.offset else []
    turns = [{**row, "tokens": _mapping(_mapping(row["detail"]).get("tokens"))} for row in rows]
    return render(request, "chats.html", {"turns": turns, "page": page.with_total(total)})


async def chat_page(request: Request) -> Response:
    raw = request.path_params["id"]
    if not raw.isdigit() or len(raw) > 18:
        raise BadRequest("a chat turn's id is a whole number")
    trace = await (await knowledge(request)).traces.one(int(raw))
    if trace is None:
        raise NotFound(f"no chat turn {raw} (only the most recent turns are kept)")
    detail = parse_detail(trace["detail"])
    return render(request, "chat.html", {"turn": trace, "detail": detail, "parts": summarise(detail)})


ROUTES = [
    Route("/chats", chats_page, methods=["GET"]),
    Route("/chats/{id}", chat_page, methods=["GET"]),
]
