"""Merging entities: pick them, preview the result, confirm; and the merge suggestions."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from admin import flash
from admin.guard import action
from admin.paging import page_of
from admin.rendering import counted, is_htmx, ref, render, unref
from proxy.core.errors import BadRequest
from proxy.knowledge.graph import MAX_MERGE, GraphService
from proxy.state import knowledge, merging_settings

SUGGESTIONS_PER_PAGE = 20


def _keys(values: QueryParams | FormData) -> list[str]:
    keys = list(dict.fromkeys(unref(v) for v in values.getlist("key") if isinstance(v, str) and v))
    if len(keys) > MAX_MERGE:
        raise BadRequest(f"at most {MAX_MERGE} entities can be merged at once")
    return keys


async def graph(request: Request) -> GraphService:
    return (await knowledge(request)).graph


async def _picked(request: Request, keys: list[str]) -> list[dict[str, Any]]:
    return await (await graph(request)).picked(keys)


async def merge_page(request: Request) -> Response:
    """The selection: the picked entities, a search to add more, and the target to keep."""
    keys = _keys(request.query_params)
    picked = await _picked(request, keys)
    target_token = request.query_params.get("target")
    target = unref(target_token) if target_token else None
    if picked and target not in {p["key"] for p in picked}:
        target = max(picked, key=lambda p: (p["degree"], p["sources"]))["key"]
    search = (request.query_params.get("q") or "").strip()[:200]
    found = []
    if search:
        listing = await (await graph(request)).list_entities(search=search, kind="", sort="degree", descending=True,
                                                     limit=20, offset=0)
        found = [(meta, degree) for meta, degree in listing.rows if meta.name_key not in keys]
    return render(request, "merge.html", {"picked": picked, "target": target, "q": search, "found": found,
                                          "target_name": next((p["name"] for p in picked if p["key"] == target), "")})


async def _plan(request: Request) -> tuple[Any, FormData]:
    form = await request.form()
    keys = _keys(form)
    target_token = form.get("target")
    if not isinstance(target_token, str) or not target_token:
        raise BadRequest("pick the entity to keep")
    target = unref(target_token)
    if target not in keys:
        keys.append(target)
    name = form.get("name") or next((p["name"] for p in await _picked(request, [target])), "")
    plan = await (await graph(request)).plan_merge(keys, name, type=form.get("type") or None,
                                                      description=form.get("description") or None)
    return plan, form


@action
async def preview(request: Request) -> Response:
    plan, form = await _plan(request)
    context = {"plan": plan, "keys": [ref(k) for k in [*plan.merged, plan.target_key]],
               "form": {k: form.get(k) or "" for k in ("name", "type", "description")},
               "target": ref(plan.target_key)}
    if is_htmx(request):
        return render(request, "_merge_preview.html", context)
    return render(request, "merge_preview.html", context)


@action
async def merge(request: Request) -> Response:
    form = await request.form()
    keys = _keys(form)
    target_token = form.get("target")
    if not isinstance(target_token, str) or not target_token:
        raise BadRequest("pick the entity to keep")
    target = unref(target_token)
    name = form.get("name") or next((p["name"] for p in await _picked(request, [target])), "")
    result = await (await graph(request)).merge([*keys, target], name, type=form.get("type") or None,
                                                   description=form.get("description") or None)
    destination = f"/admin/entities/{ref(result['target'])}"
    done = f"Merged {counted(len(result['merged']), 'entity', 'entities')} into “{result['name']}”."
    if is_htmx(request):
        return flash.leave(request, Response(status_code=204, headers={"hx-redirect": destination}), done)
    return flash.redirect(request, destination, done)


async def suggestions_page(request: Request) -> Response:
    threshold = merging_settings(request).suggest_threshold
    page = page_of(request, size=SUGGESTIONS_PER_PAGE)
    found = await (await graph(request)).suggestions(threshold)
    shown = found[page.offset:page.offset + page.size]
    pairs = []
    for suggestion in shown:
        sides = await _picked(request, [suggestion.a, suggestion.b])
        if len(sides) == 2:
            keep = max(sides, key=lambda p: (p["degree"], p["sources"]))
            pairs.append({"suggestion": suggestion, "sides": sides, "keep": keep})
    return render(request, "suggestions.html", {"pairs": pairs, "page": page.with_total(len(found)),
                                                "threshold": threshold})


@action
async def dismiss_suggestion(request: Request) -> Response:
    keys = _keys(await request.form())
    if len(keys) != 2:
        raise BadRequest("a suggestion names exactly two entities")
    await (await graph(request)).dismiss_suggestion(keys[0], keys[1])
    if is_htmx(request):
        return Response("")   # the suggestion's card goes: that says it
    return flash.redirect(request, "/admin/suggestions", "Dismissed the suggestion: the two are not offered again.")


ROUTES = [
    Route("/merge", merge_page, methods=["GET"]),
    Route("/merge/preview", preview, methods=["POST"]),
    Route("/merge", merge, methods=["POST"]),
    Route("/suggestions", suggestions_page, methods=["GET"]),
    Route("/suggestions/dismiss", dismiss_suggestion, methods=["POST"]),
]
