"""Console pages for entities and relations: the searchable list, an entity's page (edit, sources,
relations, neighbourhood), deletion with confirmation, relation edits, and the graph view."""

from __future__ import annotations

import functools
from collections.abc import Callable
from urllib.parse import urlencode

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from admin import error_pages, flash, graph_svg
from admin.guard import action
from admin.kb_links import link_of
from admin.paging import page_of
from admin.rendering import counted, is_htmx, ref, render, unref
from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.extraction.results import name_key
from proxy.knowledge.graph import Edge, GraphService, Node
from proxy.state import knowledge

PAGE_SIZE = 50
SHOWN_RELATIONS = 50  # a hub's page stays readable (and fast); the graph view shows the rest


async def graph(request: Request) -> GraphService:
    return (await knowledge(request)).graph


# the entity page's drawing fits its half of a wide screen; the graph page's has the page's width
ENTITY_GRAPH_SIZE = (520, 400)
GRAPH_PAGE_SIZE = (720, 480)


async def _svg(nodes: list[Node], edges: list[Edge], centre: str, link: Callable[[str], str],
               size: tuple[int, int]) -> str:
    """The neighbourhood drawn in a worker thread (laying out up to 200 nodes is CPU work)."""
    width, height = size
    return await anyio.to_thread.run_sync(functools.partial(graph_svg.render_svg, nodes, edges, centre, link=link,
                                                            width=width, height=height))


def names_in(token: str) -> list[str]:
    """What an entity address may name: the entity's reference (what the console's links hold,
    decoded) and the text itself, as someone typed it (``/admin/entities/Orbanex Labs``)."""
    try:
        decoded = unref(token)
    except BadRequest:   # not a reference: a name
        return [token]
    return [decoded, token] if decoded != token else [decoded]


async def entity_of(service: GraphService, token: str) -> str | None:
    """The entity an address names: by its key, else by name in any case and spacing, following
    merges (the store's name lookup). None: no entity."""
    names = names_in(token)
    if await service.entity_meta(names[0]) is not None:
        return names[0]
    for name in names:
        if name.strip():
            found = await service.resolve_name(name_key(name))
            if found is not None and await service.entity_meta(found) is not None:
                return found
    return None


def search_for(name: str) -> str:
    return "/admin/entities?" + urlencode({"q": name.strip()[:200]})


async def _go_to(request: Request, token: str, key: str | None) -> Response:
    """The entity's page, else the entity search for the name when some entity's name contains it,
    else a 404 that offers the search."""
    if key is not None:
        return RedirectResponse(f"/admin/entities/{ref(key)}", status_code=303)
    service = await graph(request)
    names = [name.strip()[:200] for name in names_in(token) if name.strip()]
    for name in names:
        if (await service.list_entities(search=name, kind="", sort="degree", descending=True, limit=1,
                                        offset=0)).total:
            return flash.redirect(request, search_for(name), f"No entity is named “{name}”: these are the "
                                  "entities whose names contain it.")
    name = names[-1] if names else ""
    return error_pages.error_page(request, 404, f"no entity named {name!r} (it may have been merged or deleted)",
                                  back=(search_for(name) if name else "/admin/entities", "Search the entities"))


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
    """From a name as extracted (or typed) to the entity's page, following merges; see ``_go_to``."""
    name = request.query_params.get("name") or ""
    key = await entity_of(await graph(request), name) if name.strip() else None
    return await _go_to(request, name, key)


async def _entity_context(request: Request, key: str) -> dict:
    page = await (await graph(request)).entity_page(key, SHOWN_RELATIONS, 1, 30)
    if page is None:
        raise NotFound("no such entity (it may have been merged or deleted)")
    link = link_of(request)
    svg = await _svg(page.nodes, page.edges, key, lambda k: link(f"/admin/entities/{ref(k)}"), ENTITY_GRAPH_SIZE)
    return {"entity": page.entity, "relations": page.relations, "relation_total": page.relation_total,
            "svg": svg, "legend": graph_svg.legend(n.type for n in page.nodes), "degree": page.degree}


async def entity_page(request: Request) -> Response:
    token = request.path_params["ref"]
    key = await entity_of(await graph(request), token)
    if key is None or ref(key) != token:   # a name, or a reference to what was merged away
        return await _go_to(request, token, key)
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
    return flash.redirect(request, f"/admin/entities/{ref(result['target'])}", "Saved the entity.")


@action
async def undo_alias(request: Request) -> Response:
    """Entity resolution's merge undone: the alias's name becomes its own entity again."""
    key, alias = unref(request.path_params["ref"]), unref(request.path_params["alias"])
    result = await (await graph(request)).undo_resolution(alias)
    back = key if key in result["entities"] else alias   # the target, unless nothing but the alias named it
    return flash.redirect(request, f"/admin/entities/{ref(back)}", f"“{alias}” is its own entity again.")


async def confirm_delete(request: Request) -> Response:
    service = await graph(request)
    key = unref(request.path_params["ref"])
    entity = await service.entity_detail(key)
    if entity is None:
        raise NotFound("no such entity")
    return render(request, "entity_delete.html", {"entity": entity, "relation_total": await service.degree(key)})


@action
async def delete_entity(request: Request) -> Response:
    service = await graph(request)
    key = unref(request.path_params["ref"])
    meta = await service.entity_meta(key)
    result = await service.delete_entity(key)
    name = meta.name if meta is not None else key
    return flash.redirect(request, "/admin/entities", f"Deleted the entity “{name}” and its "
                          f"{counted(result['relations_removed'], 'relation')}.")


@action
async def edit_relation(request: Request) -> Response:
    pair = unref(request.path_params["ref"])
    form = await request.form()
    await (await graph(request)).edit_relation(pair, keywords=form.get("keywords"), description=form.get("description"),
                                   weight=form.get("weight"))
    return flash.redirect(request, _back(form.get("back")), "Saved the relation.")


@action
async def delete_relation(request: Request) -> Response:
    form = await request.form()
    await (await graph(request)).delete_relation(unref(request.path_params["ref"]))
    return flash.redirect(request, _back(form.get("back")), "Deleted the relation.")


def _back(raw: object) -> str:
    return raw if isinstance(raw, str) and raw.startswith("/admin/") and not raw.startswith("//") else "/admin/entities"


async def graph_page(request: Request) -> Response:
    service = await graph(request)
    depth = _int(request, "depth", 1, 1, 3)
    cap = _int(request, "cap", 40, 5, 200)
    token = request.query_params.get("entity")
    if token:
        found = await entity_of(service, token)   # a reference, or a name typed into the address
        if found is None:
            raise NotFound(f"no entity named {token!r} (it may have been merged or deleted)")
        key = found
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
    link = link_of(request)
    svg = await _svg(nodes, edges, key, lambda k: link(f"/admin/graph?entity={ref(k)}&depth={depth}&cap={cap}"),
                     GRAPH_PAGE_SIZE)
    return render(request, "graph.html", {"svg": svg, "entity": meta, "depth": depth, "cap": cap,
                                          "legend": graph_svg.legend(n.type for n in nodes), "shown": len(nodes)})


ROUTES = [
    Route("/entities", entities_page, methods=["GET"]),
    Route("/entities/find", find_entity, methods=["GET"]),
    Route("/entities/{ref}", entity_page, methods=["GET"]),
    Route("/entities/{ref}", edit_entity, methods=["POST"]),
    Route("/entities/{ref}/aliases/{alias}/undo", undo_alias, methods=["POST"]),
    Route("/entities/{ref}/delete", confirm_delete, methods=["GET"]),
    Route("/entities/{ref}/delete", delete_entity, methods=["POST"]),
    Route("/relations/{ref}/edit", edit_relation, methods=["POST"]),
    Route("/relations/{ref}/delete", delete_relation, methods=["POST"]),
    Route("/graph", graph_page, methods=["GET"]),
]
