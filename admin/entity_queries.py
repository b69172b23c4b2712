"""What the entity pages read: the sorted, filtered list (degrees from igraph, rows from the
in-memory copy, filters in DuckDB), an entity's sources and relations, and its neighbourhood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from proxy.store.store import KnowledgeStore
from proxy.store.rows_memory import EntityMeta
from proxy.store.duckdb.memory_load import descriptions
from proxy.store.duckdb.connection import Con

from admin.graph_svg import Edge, Node


SHOWN_CHUNKS = 20


@dataclass
class ListedEntity:
    name_key: str
    name: str
    type: str
    source_ids: tuple[str, ...]
    description: str


@dataclass
class EntityListing:
    rows: list[tuple[ListedEntity, int]]  # (entity, degree)
    total: int


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def matching_keys(con: Con, search: str, kind: str) -> list[str]:
    where, args = [], []
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append(_like(search))
    if kind:
        where.append("type = ?")
        args.append(kind)
    clause = " AND ".join(where) or "true"
    return [r[0] for r in con.execute(f"SELECT name_key FROM entities WHERE {clause}", args).fetchall()]


def names_page(con: Con, search: str, kind: str, descending: bool, limit: int, offset: int) -> tuple[list[str], int]:
    where, args = [], []
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append(_like(search))
    if kind:
        where.append("type = ?")
        args.append(kind)
    clause = " AND ".join(where) or "true"
    total = con.execute(f"SELECT count(*) FROM entities WHERE {clause}", args).fetchone()[0]
    keys = [r[0] for r in con.execute(
        f"SELECT name_key FROM entities WHERE {clause} ORDER BY lower(name) {'DESC' if descending else 'ASC'}, "
        "name_key LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()]
    return keys, total


def entity_types(con: Con) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in con.execute(
        "SELECT type, count(*) FROM entities GROUP BY type ORDER BY count(*) DESC, type LIMIT 100").fetchall()]


async def list_entities(store: KnowledgeStore, *, search: str, kind: str, sort: str, descending: bool,
                        limit: int, offset: int) -> EntityListing:
    """One page of entities with their degrees and descriptions (the page's rows read from DuckDB)."""
    metas, total = await _listing(store, search=search, kind=kind, sort=sort, descending=descending,
                                  limit=limit, offset=offset)
    text = await store.db.read(descriptions, "entities", [(meta.key, meta.name_key) for meta, _ in metas])
    return EntityListing([(ListedEntity(m.name_key, m.name, m.type, m.source_ids, text.get(m.key, "")), degree)
                          for m, degree in metas], total)


async def _listing(store: KnowledgeStore, *, search: str, kind: str, sort: str, descending: bool,
                   limit: int, offset: int) -> tuple[list[tuple[EntityMeta, int]], int]:
    if sort == "name":
        keys, total = await store.db.read(names_page, search, kind, descending, limit, offset)
        with store.memory_lock:
            degrees = store.graph.degrees(keys)
            return _metas(store, keys, degrees), total
    if search or kind:
        keys = await store.db.read(matching_keys, search, kind)
        with store.memory_lock:
            degrees = store.graph.degrees(keys)
        order = _ranked(np.asarray([degrees[k] for k in keys]), np.asarray(keys, dtype=object), descending)
        page = [keys[int(i)] for i in order[offset:offset + limit]]
        with store.memory_lock:
            return _metas(store, page, degrees), len(keys)
    with store.memory_lock:  # no filter: the whole graph's degrees, ranked in numpy
        graph = store.graph.g
        total = graph.vcount()
        if total == 0:
            return [], 0
        degree = np.asarray(graph.degree())
        order = _ranked(degree, np.asarray(graph.vs["name"], dtype=object), descending)[offset:offset + limit]
        keys = graph.vs.select([int(i) for i in order])["name"] if len(order) else []
        return _metas(store, keys, dict(zip(keys, (int(degree[i]) for i in order), strict=True))), total


def _ranked(degree: np.ndarray, keys: np.ndarray, descending: bool) -> np.ndarray:
    """Positions by degree, ties by key: the same order whether or not a filter applies."""
    if not len(degree):
        return np.empty(0, dtype=np.int64)
    return np.lexsort((keys.astype(str), -degree if descending else degree))


def _metas(store: KnowledgeStore, keys: list[str], degrees: dict[str, int]) -> list[tuple[EntityMeta, int]]:
    out = []
    for key in keys:
        meta = store.rows.entity(key)
        if meta is not None:
            out.append((meta, degrees.get(key, 0)))
    return out


def entity_detail(con: Con, key: str) -> dict[str, Any] | None:
    row = con.execute("SELECT name, type, description, source_ids, created_at, updated_at FROM entities "
                      "WHERE name_key = ?", [key]).fetchone()
    if row is None:
        return None
    sources = list(row[3])
    documents = con.execute("""
        SELECT d.id, d.name, count(*) FROM document_chunks dc JOIN documents d ON d.id = dc.document_id
        WHERE dc.chunk_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY d.id, d.name ORDER BY d.name""",
                            [sources]).fetchall()
    chunks = con.execute("SELECT id, content FROM chunks WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                         [sources[:SHOWN_CHUNKS]]).fetchall()
    aliases = [r[0] for r in con.execute("SELECT alias_key FROM aliases WHERE target_key = ? ORDER BY 1",
                                         [key]).fetchall()]
    edited = con.execute("SELECT count(*) FROM entity_edits WHERE name_key = ?", [key]).fetchone()[0] > 0
    return {
        "key": key, "name": row[0], "type": row[1], "description": row[2], "sources": sources,
        "created_at": row[4], "updated_at": row[5], "aliases": aliases, "edited": edited,
        "documents": [{"id": d[0], "name": d[1], "chunks": d[2]} for d in documents],
        "chunks": [{"id": c[0], "content": c[1]} for c in chunks],
    }


def entity_relations(store: KnowledgeStore, key: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    """The entity's relations, heaviest first, from the graph and the in-memory rows (a scan of
    the relations table costs tens of milliseconds at 200k relations); the shown ones' descriptions
    by their vector keys."""
    shown, total, keys = _entity_relations(store, key, limit)
    text = store.db.read_sync(descriptions, "relations", keys)
    for relation, (vector_key, _) in zip(shown, keys, strict=True):
        relation["description"] = text.get(vector_key, "")
    return shown, total


def _entity_relations(store: KnowledgeStore, key: str,
                      limit: int) -> tuple[list[dict[str, Any]], int, list[tuple[int, str]]]:
    with store.memory_lock:
        if not store.graph.has(key):
            return [], 0, []
        graph = store.graph.g
        others = graph.vs.select(graph.neighbors(key))["name"]
        found = []
        for other in others:
            meta = store.rows.relation("\x1f".join(sorted((key, other))))
            if meta is not None:
                found.append((meta, other))
        found.sort(key=lambda item: (-item[0].weight, item[1]))
        shown = []
        for meta, other in found[:limit]:
            entity = store.rows.entity(other)
            shown.append({"pair": meta.pair, "other": entity.name if entity else other, "other_key": other,
                          "keywords": list(meta.keywords), "weight": meta.weight})
        return shown, len(found), [(meta.key, meta.pair) for meta, _ in found[:limit]]


def resolve_name(con: Con, name_key: str) -> str | None:
    """An entity key for a name as extracted: itself, or what it was merged into."""
    row = con.execute("SELECT name_key FROM entities WHERE name_key = ?", [name_key]).fetchone()
    if row:
        return row[0]
    row = con.execute("SELECT target_key FROM aliases WHERE alias_key = ?", [name_key]).fetchone()
    return row[0] if row else None


def neighbourhood(store: KnowledgeStore, key: str, depth: int, cap: int) -> tuple[list[Node], list[Edge]]:
    """The entity and its neighbours up to ``depth`` hops, at most ``cap`` nodes: ring by ring,
    the best connected of each ring first, stopping when the cap is reached (a hub's second ring
    can hold half the graph)."""
    with store.memory_lock:
        graph = store.graph.g
        if not store.graph.has(key):
            return [], []
        centre = graph.vs.find(name=key).index
        chosen = [centre]
        for ring in range(1, depth + 1):
            if len(chosen) >= cap:
                break
            members = np.asarray(graph.neighborhood(centre, order=ring, mindist=ring), dtype=np.int64)
            if not len(members):
                break
            degree = np.asarray(graph.degree(members.tolist()))
            room = cap - len(chosen)
            chosen.extend(int(v) for v in members[np.lexsort((members, -degree))][:room])
        degrees = dict(zip(chosen, graph.degree(chosen), strict=True))
        sub = graph.induced_subgraph(chosen)  # keeps the graph's vertex order, not ``chosen``'s
        names = sub.vs["name"]
        nodes = []
        for name, vertex in zip(names, sorted(chosen), strict=True):
            meta = store.rows.entity(name)
            nodes.append(Node(name, meta.name if meta else name, meta.type if meta else "unknown", degrees[vertex]))
        edges = []
        for e in sub.es:
            a, b = names[e.source], names[e.target]
            relation = store.rows.relation("\x1f".join(sorted((a, b))))
            edges.append(Edge(a, b, float(e["weight"] or 1.0), ", ".join(relation.keywords) if relation else ""))
        return sorted(nodes, key=lambda n: n.key), edges
