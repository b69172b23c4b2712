"""Console pages for entities and relations: the searchable list, an entity's page (edit, sources,
relations, neighbourhood), deletion with confirmation, relation edits, and the graph view."""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin import graph_svg
from admin.guard import action
from admin.paging import page_of
from admin.rendering import is_htmx, ref, render, unref
from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.extraction.results import name_key
from proxy.knowledge.graph import Edge, GraphService, Node
from proxy.state import knowledge

PAGE_SIZE = 50
SHOWN_RELATIONS = 50  # a hub's page stays readable (and fast); the graph view shows the rest


async def graph(request: Request) -> GraphService:
    return (await knowledge(request)).graph


async def _svg(nodes: list[Node], edges: list[Edge], centre: str, link: Callable[[str], str]) -> str:
    """The neighbourhood drawn in a worker thread (laying out up to 200 nodes is CPU work)."""
    return await anyio.to_thread.run_sync(functools.partial(graph_svg.render_svg, nodes, edges, centre, link=link))


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise BadRequest(f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}")
    return value


async def entities_page(request: Request) -> Response:
    service = await graph(request)
    params = request.query_params
    search = (params.get("q") or "").strip()[:200]
    kind = (params.get("type") or "").strip()[:100]
    sort = "name" if params.get("sort") == "name" else "degree"
    order = params.get("order") if params.get("order") in ("asc", "desc") else ("asc" if sort == "name" else "desc")
    page = page_of(request, size=PAGE_SIZE)
    listing = await service.list_entities(search=search, kind=kind, sort=sort, descending=order == "desc",
                                          limit=page.size, offset=page.offset)
    context = {"rows": listing.rows, "page": page.with_total(listing.total), "q": search, "type": kind,
               "sort": sort, "order": order}
    if is_htmx(request) and request.headers.get("hx-target") == "entity-table":
        return render(request, "_entity_table.html", context)
    context["types"] = await service.entity_types()
    return render(request, "entities.html", context)


async def find_entity(request: Request) -> Response:
    """From a name as extracted to the entity's page (following merges)."""
    name = request.query_params.get("name") or ""
    key = await (await graph(request)).resolve_name(name_key(name)) if name.strip() else None
    if key is None:
        raise NotFound(f"no entity named {name!r} (it may have been deleted)")
    return RedirectResponse(f"/admin/entities/{ref(key)}", status_code=303)


async def _entity_context(request: Request, key: str) -> dict:
    page = await (await graph(request)).entity_page(key, SHOWN_RELATIONS, 1, 30)
    if page is None:
        raise NotFound("no such entity (it may have been merged or deleted)")
    svg = await _svg(page.nodes, page.edges, key, lambda k: f"/admin/entities/{ref(k)}")
    return {"entity": page.entity, "relations": page.relations, "relation_total": page.relation_total,
            "svg": svg, "legend": graph_svg.legend(n.type for n in page.nodes), "degree": page.degree}


async def entity_page(request: Request) -> Response:
    key = unref(request.path_params["ref"])
    return render(request, "entity.html", {**await _entity_context(request, key), "conflict": None})


@action
async def edit_entity(request: Request) -> Response:
    key = unref(request.path_params["ref"])
    form = await request.form()
    name, kind, description = form.get("name"), form.get("type"), form.get("description")
    try:
        result = await (await graph(request)).edit_entity(key, name=name, type=kind or None,
                                              description=description if isinstance(description, str) else None)
    except Conflict as exc:
        other = name_key(str(name))
        context = await _entity_context(request, key)
        context["conflict"] = {"message": exc.message, "merge_url": f"/admin/merge?key={ref(key)}&key={ref(other)}"
                                                                     f"&target={ref(other)}"}
        return render(request, "entity.html", context, status=409)
    return RedirectResponse(f"/admin/entities/{ref(result['target'])}", status_code=303)


async def confirm_delete(request: Request) -> Response:
    service = await graph(request)
    key = unref(request.path_params["ref"])
    entity = await service.entity_detail(key)
    if entity is None:
        raise NotFound("no such entity")
    return render(request, "entity_delete.html", {"entity": entity, "relation_total": await service.degree(key)})


@action
async def delete_entity(request: Request) -> Response:
    await (await graph(request)).delete_entity(unref(request.path_params["ref"]))
    return RedirectResponse("/admin/entities", status_code=303)


@action
async def edit_relation(request: Request) -> Response:
    pair = unref(request.path_params["ref"])
    form = await request.form()
    await (await graph(request)).edit_relation(pair, keywords=form.get("keywords"), description=form.get("description"),
                                   weight=form.get("weight"))
    return RedirectResponse(_back(form.get("back")), status_code=303)


@action
async def delete_relation(request: Request) -> Response:
    form = await request.form()
    await (await graph(request)).delete_relation(unref(request.path_params["ref"]))
    return RedirectResponse(_back(form.get("back")), status_code=303)


def _back(raw: object) -> str:
    return raw if isinstance(raw, str) and raw.startswith("/admin/") and not raw.startswith("//") else "/admin/entities"


async def graph_page(request: Request) -> Response:
    service = await graph(request)
    depth = _int(request, "depth", 1, 1, 3)
    cap = _int(request, "cap", 40, 5, 200)
    token = request.query_params.get("entity")
    if token:
        key = unref(token)
    else:  # no entity asked for: start from the best connected one
        listing = await service.list_entities(search="", kind="", sort="degree", descending=True, limit=1,
                                              offset=0)
        key = listing.rows[0][0].name_key if listing.rows else ""
    if not key:
        return render(request, "graph.html", {"svg": None, "entity": None, "depth": depth, "cap": cap, "legend": []})
    meta = await service.entity_meta(key)
    if meta is None:
        raise NotFound("no such entity")
    nodes, edges = await service.neighbourhood(key, depth, cap)
    svg = await _svg(nodes, edges, key, lambda k: f"/admin/graph?entity={ref(k)}&depth={depth}&cap={cap}")
    return render(request, "graph.html", {"svg": svg, "entity": meta, "depth": depth, "cap": cap,
                                          "legend": graph_svg.legend(n.type for n in nodes), "shown": len(nodes)})


ROUTES = [
    Route("/entities", entities_page, methods=["GET"]),
    Route("/entities/find", find_entity, methods=["GET"]),
    Route("/entities/{ref}", entity_page, methods=["GET"]),
    Route("/entities/{ref}", edit_entity, methods=["POST"]),
    Route("/entities/{ref}/delete", confirm_delete, methods=["GET"]),
    Route("/entities/{ref}/delete", delete_entity, methods=["POST"]),
    Route("/relations/{ref}/edit", edit_relation, methods=["POST"]),
    Route("/relations/{ref}/delete", delete_relation, methods=["POST"]),
    Route("/graph", graph_page, methods=["GET"]),
]
