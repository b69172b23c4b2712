"""The graph's tables in PostgreSQL (``store.tables.graph_rows``): entities, relations, extraction
results, aliases, hand edits, dismissed suggestions and the console's entity queries; and
``write_curation``, which the commit writer runs for a changeset's aliases and edits.

Text is ordered with ``COLLATE "C"`` (code point order): the embedded store's order, and Python's
``sorted``, whatever the server's default collation."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql

from proxy.store.changes import Curation, EntityEdit, RelationEdit
from proxy.store.postgres.connection import Con, PgDatabase, holds_nul, vector_array
from proxy.store.protocols.graph_rows import (
    StoredEdits,
    StoredEntity,
    StoredRelation,
    StoredRow,
    Subject,
)
from proxy.store.sql_graph_rows import SqlGraphRows

ID_COLUMN = {"entities": "name_key", "relations": "pair_key"}


# --- recomputing the graph ---

def load_aliases(con: Con) -> dict[str, str]:
    return dict(con.execute("SELECT alias_key, target_key FROM aliases").fetchall())


def touched_by(con: Con, chunk_ids: list[str]) -> tuple[set[str], set[str]]:
    if not chunk_ids:
        return set(), set()
    entities = {r[0] for r in con.execute(
        "SELECT name_key FROM entities WHERE source_ids && %s::text[]", [list(chunk_ids)]).fetchall()}
    pairs = {r[0] for r in con.execute(
        "SELECT pair_key FROM relations WHERE source_ids && %s::text[]", [list(chunk_ids)]).fetchall()}
    return entities, pairs


def stored_rows(con: Con, table: Subject, keys: list[str]) -> dict[str, StoredRow]:
    if not keys:
        return {}
    name = sql.SQL("name" if table == "entities" else "''")
    id_column = sql.Identifier(ID_COLUMN[table])
    rows = con.execute(sql.SQL("SELECT {id}, {name}, source_ids, key, embed_hash FROM {table} "
                               "WHERE {id} = ANY(%s::text[])").format(id=id_column, name=name,
                                                                     table=sql.Identifier(table)),
                       [list(keys)]).fetchall()
    return {r[0]: StoredRow(r[1], list(r[2]), r[3], r[4]) for r in rows}


def embeddings_by(con: Con, table: Subject, keys: list[str]) -> np.ndarray:
    """The rows' embeddings as one matrix, in the order of the sorted keys (binary: no text floats)."""
    id_column = sql.Identifier(ID_COLUMN[table])
    with con.cursor(binary=True) as cursor:
        rows = cursor.execute(sql.SQL("SELECT embedding FROM {table} WHERE {id} = ANY(%s::text[]) "
                                      'ORDER BY {id} COLLATE "C"').format(table=sql.Identifier(table), id=id_column),
                              [list(keys)]).fetchall()
    if not rows:
        return np.empty((0, 0), dtype=np.float32)
    return np.vstack([vector_array(r[0]) for r in rows]).astype(np.float32, copy=False)


def extraction_results(con: Con, chunk_ids: list[str]) -> dict[str, str]:
    if not chunk_ids:
        return {}
    return dict(con.execute("SELECT chunk_id, result FROM extractions WHERE chunk_id = ANY(%s::text[])",
                            [list(chunk_ids)]).fetchall())


def load_edits(con: Con, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits:
    edits = StoredEdits({}, {})
    if entity_keys:
        for key, name, kind, description in con.execute(
                "SELECT name_key, name, type, description FROM entity_edits WHERE name_key = ANY(%s::text[])",
                [list(entity_keys)]).fetchall():
            edits.entities[key] = EntityEdit(name, kind, description)
    if pair_keys:
        for pair, keywords, description, weight in con.execute(
                "SELECT pair_key, keywords, description, weight FROM relation_edits WHERE pair_key = ANY(%s::text[])",
                [list(pair_keys)]).fetchall():
            edits.relations[pair] = RelationEdit(list(keywords) if keywords is not None else None, description,
                                                 weight)
    return edits


# --- curation ---

def entity_rows(con: Con, keys: list[str]) -> dict[str, StoredEntity]:
    rows = con.execute("SELECT name_key, name, type, description, source_ids FROM entities "
                       "WHERE name_key = ANY(%s::text[])", [list(keys)]).fetchall()
    return {r[0]: StoredEntity(r[1], r[2], r[3], list(r[4])) for r in rows}


def relations_touching(con: Con, keys: list[str]) -> list[StoredRelation]:
    return [StoredRelation(r[0], r[1], r[2], list(r[3])) for r in con.execute(
        "SELECT pair_key, source, target, source_ids FROM relations "
        "WHERE source = ANY(%(k)s::text[]) OR target = ANY(%(k)s::text[]) "
        'ORDER BY pair_key COLLATE "C"', {"k": list(keys)}).fetchall()]


def relation_row(con: Con, pair: str) -> StoredRelation | None:
    row = con.execute("SELECT source, target, source_ids FROM relations WHERE pair_key = %s", [pair]).fetchone()
    return StoredRelation(pair, row[0], row[1], list(row[2])) if row else None


def dismissed(con: Con) -> set[str]:
    return {r[0] for r in con.execute("SELECT pair_key FROM dismissed_suggestions").fetchall()}


def dismiss(con: Con, pair: str, stamp: datetime) -> None:
    con.execute("INSERT INTO dismissed_suggestions VALUES (%s, %s) "
                "ON CONFLICT (pair_key) DO UPDATE SET created_at = excluded.created_at", [pair, stamp])


def write_curation(con: Con, curation: Curation, stamp: datetime) -> None:
    """A changeset's aliases and hand edits, in its transaction (see ``Changeset.curation``). The
    order is the embedded store's: an alias just written into a target losing its aliases goes too."""
    with con.cursor() as cursor:
        if curation.aliases_dropped:
            cursor.execute("DELETE FROM aliases WHERE alias_key = ANY(%s::text[])", [list(curation.aliases_dropped)])
        if curation.aliases:
            cursor.executemany(
                "INSERT INTO aliases (alias_key, target_key, created_at, reason, evidence) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (alias_key) DO UPDATE "
                "SET target_key = excluded.target_key, created_at = excluded.created_at, "
                "reason = CASE WHEN excluded.reason = '' THEN aliases.reason ELSE excluded.reason END, "
                "evidence = CASE WHEN excluded.reason = '' THEN aliases.evidence ELSE excluded.evidence END",
                [(alias, target, stamp, *curation.resolved.get(alias, ("", "")))
                 for alias, target in curation.aliases.items()])
        if curation.entity_edits_dropped:
            cursor.execute("DELETE FROM entity_edits WHERE name_key = ANY(%s::text[])",
                           [list(curation.entity_edits_dropped)])
        if curation.relation_edits_dropped:
            cursor.execute("DELETE FROM relation_edits WHERE pair_key = ANY(%s::text[])",
                           [list(curation.relation_edits_dropped)])
        if curation.aliases_into_dropped:
            cursor.execute("DELETE FROM aliases WHERE target_key = ANY(%s::text[])",
                           [list(curation.aliases_into_dropped)])
        if curation.resolved_into_dropped:
            cursor.execute("DELETE FROM aliases WHERE reason <> '' AND target_key = ANY(%s::text[])",
                           [list(curation.resolved_into_dropped)])
        if curation.entity_edits:
            cursor.executemany(
                "INSERT INTO entity_edits VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name_key) DO UPDATE "
                "SET name = excluded.name, type = excluded.type, description = excluded.description, "
                "updated_at = excluded.updated_at",
                [(key, edit.name, edit.type, edit.description, stamp) for key, edit in curation.entity_edits.items()])
        if curation.relation_edits:
            cursor.executemany(
                "INSERT INTO relation_edits VALUES (%s, %s::text[], %s, %s, %s) ON CONFLICT (pair_key) DO UPDATE "
                "SET keywords = excluded.keywords, description = excluded.description, weight = excluded.weight, "
                "updated_at = excluded.updated_at",
                [(pair, edit.keywords, edit.description, edit.weight, stamp)
                 for pair, edit in curation.relation_edits.items()])


# --- the console's and the API's entity queries ---

def alias_target(con: Con, key: str) -> str | None:
    row = con.execute("SELECT target_key FROM aliases WHERE alias_key = %s", [key]).fetchone()
    return row[0] if row else None


def resolve_name(con: Con, name_key: str) -> str | None:
    row = con.execute("SELECT name_key FROM entities WHERE name_key = %s", [name_key]).fetchone()
    if row:
        return row[0]
    return alias_target(con, name_key)


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _filter(search: str, kind: str) -> tuple[sql.Composable, list[Any]]:
    if holds_nul(search, kind):
        return sql.SQL("false"), []
    where: list[sql.Composable] = []
    args: list[Any] = []
    if search:
        where.append(sql.SQL("name ILIKE %s ESCAPE '\\'"))
        args.append(_like(search))
    if kind:
        where.append(sql.SQL("type = %s"))
        args.append(kind)
    return sql.SQL(" AND ").join(where) if where else sql.SQL("true"), args


def matching_keys(con: Con, search: str, kind: str) -> list[str]:
    clause, args = _filter(search, kind)
    return [r[0] for r in con.execute(sql.SQL("SELECT name_key FROM entities WHERE {}").format(clause),
                                      args).fetchall()]


def names_page(con: Con, search: str, kind: str, descending: bool, limit: int, offset: int) -> tuple[list[str], int]:
    clause, args = _filter(search, kind)
    total = (con.execute(sql.SQL("SELECT count(*) FROM entities WHERE {}").format(clause), args).fetchone() or (0,))[0]
    keys = [r[0] for r in con.execute(
        sql.SQL('SELECT name_key FROM entities WHERE {clause} ORDER BY lower(name) COLLATE "C" {direction}, '
                'name_key COLLATE "C" LIMIT %s OFFSET %s').format(
            clause=clause, direction=sql.SQL("DESC" if descending else "ASC")),
        [*args, limit, offset]).fetchall()]
    return keys, total


def entity_types(con: Con) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in con.execute(
        'SELECT type, count(*) FROM entities GROUP BY type ORDER BY count(*) DESC, type COLLATE "C" LIMIT 100'
    ).fetchall()]


def entity_detail(con: Con, key: str, shown_chunks: int) -> dict[str, Any] | None:
    row = con.execute("SELECT name, type, description, source_ids, created_at, updated_at FROM entities "
                      "WHERE name_key = %s", [key]).fetchone()
    if row is None:
        return None
    sources = list(row[3])
    documents = con.execute("""
        SELECT d.id, d.name, count(*) FROM document_chunks dc JOIN documents d ON d.id = dc.document_id
        WHERE dc.chunk_id = ANY(%s::text[]) GROUP BY d.id, d.name ORDER BY d.name COLLATE "C" """,
                            [sources]).fetchall()
    chunks = con.execute("SELECT id, content FROM chunks WHERE id = ANY(%s::text[])",
                         [sources[:shown_chunks]]).fetchall()
    named = con.execute('SELECT alias_key, reason, evidence FROM aliases WHERE target_key = %s '
                        'ORDER BY alias_key COLLATE "C"', [key]).fetchall()
    aliases = [r[0] for r in named]
    edited = con.execute("SELECT 1 FROM entity_edits WHERE name_key = %s", [key]).fetchone() is not None
    return {
        "key": key, "name": row[0], "type": row[1], "description": row[2], "sources": sources,
        "created_at": row[4], "updated_at": row[5], "aliases": aliases, "edited": edited,
        "resolved": [{"alias": a, "reason": r, "evidence": e} for a, r, e in named if r],
        "documents": [{"id": d[0], "name": d[1], "chunks": d[2]} for d in documents],
        "chunks": [{"id": c[0], "content": c[1]} for c in chunks],
    }


class PgGraphRows(SqlGraphRows):
    """``GraphRows`` (proxy/store/protocols/graph_rows.py) over one PostgreSQL schema."""

    sql = sys.modules[__name__]

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.db: PgDatabase = db
