"""The graph's tables in DuckDB (``store.tables.graph_rows``): entities, relations, extraction
results, aliases, hand edits, dismissed suggestions and the console's entity queries; and
``write_curation``, which the commit writer runs for a changeset's aliases and edits."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import numpy as np

from proxy.store.changes import Curation, EntityEdit, RelationEdit
from proxy.store.duckdb.connection import Con, Database, relation_ready
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
        "SELECT name_key FROM entities WHERE list_has_any(source_ids, ?::VARCHAR[])", [chunk_ids]).fetchall()}
    pairs = {r[0] for r in con.execute(
        "SELECT pair_key FROM relations WHERE list_has_any(source_ids, ?::VARCHAR[])", [chunk_ids]).fetchall()}
    return entities, pairs


def stored_rows(con: Con, table: Subject, keys: list[str]) -> dict[str, StoredRow]:
    if not keys:
        return {}
    name = "name" if table == "entities" else "''"
    id_column = ID_COLUMN[table]
    rows = con.execute(f"SELECT {id_column}, {name}, source_ids, key, embed_hash FROM {table} "
                       f"WHERE {id_column} IN (SELECT unnest(?::VARCHAR[]))", [keys]).fetchall()
    return {r[0]: StoredRow(r[1], list(r[2]), r[3], r[4]) for r in rows}


def embeddings_by(con: Con, table: Subject, keys: list[str]) -> np.ndarray:
    """The rows' embeddings as one matrix, through Arrow (lists of floats via Python are slow)."""
    id_column = ID_COLUMN[table]
    rel = relation_ready(con).sql(f"SELECT embedding FROM {table} WHERE {id_column} IN "
                                  f"(SELECT unnest($keys::VARCHAR[])) ORDER BY {id_column}", params={"keys": keys})
    column = rel.to_arrow_table().column("embedding").combine_chunks()
    if len(column) == 0:
        return np.empty((0, 0), dtype=np.float32)
    return np.asarray(column.values, dtype=np.float32).reshape(len(column), -1)


def extraction_results(con: Con, chunk_ids: list[str]) -> dict[str, str]:
    if not chunk_ids:
        return {}
    return dict(con.execute("SELECT chunk_id, result FROM extractions WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))",
                            [chunk_ids]).fetchall())


def load_edits(con: Con, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits:
    edits = StoredEdits({}, {})
    if entity_keys:
        for key, name, kind, description in con.execute(
                "SELECT name_key, name, type, description FROM entity_edits "
                "WHERE name_key IN (SELECT unnest(?::VARCHAR[]))", [entity_keys]).fetchall():
            edits.entities[key] = EntityEdit(name, kind, description)
    if pair_keys:
        for pair, keywords, description, weight in con.execute(
                "SELECT pair_key, keywords, description, weight FROM relation_edits "
                "WHERE pair_key IN (SELECT unnest(?::VARCHAR[]))", [pair_keys]).fetchall():
            edits.relations[pair] = RelationEdit(list(keywords) if keywords is not None else None, description,
                                                 weight)
    return edits


# --- curation ---

def entity_rows(con: Con, keys: list[str]) -> dict[str, StoredEntity]:
    rows = con.execute("SELECT name_key, name, type, description, source_ids FROM entities "
                       "WHERE name_key IN (SELECT unnest(?::VARCHAR[]))", [keys]).fetchall()
    return {r[0]: StoredEntity(r[1], r[2], r[3], list(r[4])) for r in rows}


def relations_touching(con: Con, keys: list[str]) -> list[StoredRelation]:
    return [StoredRelation(r[0], r[1], r[2], list(r[3])) for r in con.execute(
        "SELECT pair_key, source, target, source_ids FROM relations "
        "WHERE source IN (SELECT unnest($k::VARCHAR[])) OR target IN (SELECT unnest($k::VARCHAR[])) "
        "ORDER BY pair_key", {"k": keys}).fetchall()]


def relation_row(con: Con, pair: str) -> StoredRelation | None:
    row = con.execute("SELECT source, target, source_ids FROM relations WHERE pair_key = ?", [pair]).fetchone()
    return StoredRelation(pair, row[0], row[1], list(row[2])) if row else None


def dismissed(con: Con) -> set[str]:
    return {r[0] for r in con.execute("SELECT pair_key FROM dismissed_suggestions").fetchall()}


def dismiss(con: Con, pair: str, stamp: datetime) -> None:
    con.execute("INSERT OR REPLACE INTO dismissed_suggestions VALUES (?, ?)", [pair, stamp])


def write_curation(con: Con, curation: Curation, stamp: datetime) -> None:
    """A changeset's aliases and hand edits, in its transaction (see ``Changeset.curation``)."""
    if curation.aliases_dropped:
        con.execute("DELETE FROM aliases WHERE alias_key IN (SELECT unnest(?::VARCHAR[]))",
                    [curation.aliases_dropped])
    for alias, target in curation.aliases.items():
        reason, evidence = curation.resolved.get(alias, ("", ""))
        # an alias a merge points elsewhere keeps the reason and evidence it was made with
        con.execute("INSERT INTO aliases (alias_key, target_key, created_at, reason, evidence) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (alias_key) DO UPDATE SET target_key = excluded.target_key, "
                    "created_at = excluded.created_at, "
                    "reason = CASE WHEN excluded.reason = '' THEN aliases.reason ELSE excluded.reason END, "
                    "evidence = CASE WHEN excluded.reason = '' THEN aliases.evidence ELSE excluded.evidence END",
                    [alias, target, stamp, reason, evidence])
    if curation.entity_edits_dropped:
        con.execute("DELETE FROM entity_edits WHERE name_key IN (SELECT unnest(?::VARCHAR[]))",
                    [curation.entity_edits_dropped])
    if curation.relation_edits_dropped:
        con.execute("DELETE FROM relation_edits WHERE pair_key IN (SELECT unnest(?::VARCHAR[]))",
                    [curation.relation_edits_dropped])
    if curation.aliases_into_dropped:
        con.execute("DELETE FROM aliases WHERE target_key IN (SELECT unnest(?::VARCHAR[]))",
                    [curation.aliases_into_dropped])
    if curation.resolved_into_dropped:
        con.execute("DELETE FROM aliases WHERE reason <> '' AND target_key IN (SELECT unnest(?::VARCHAR[]))",
                    [curation.resolved_into_dropped])
    for key, edit in curation.entity_edits.items():
        con.execute("INSERT OR REPLACE INTO entity_edits VALUES (?, ?, ?, ?, ?)",
                    [key, edit.name, edit.type, edit.description, stamp])
    for pair, redit in curation.relation_edits.items():
        con.execute("INSERT OR REPLACE INTO relation_edits VALUES (?, ?, ?, ?, ?)",
                    [pair, redit.keywords, redit.description, redit.weight, stamp])


# --- the console's and the API's entity queries ---

def alias_target(con: Con, key: str) -> str | None:
    row = con.execute("SELECT target_key FROM aliases WHERE alias_key = ?", [key]).fetchone()
    return row[0] if row else None


def resolve_name(con: Con, name_key: str) -> str | None:
    row = con.execute("SELECT name_key FROM entities WHERE name_key = ?", [name_key]).fetchone()
    if row:
        return row[0]
    return alias_target(con, name_key)


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _filter(search: str, kind: str) -> tuple[str, list[Any]]:
    where, args = [], []
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append(_like(search))
    if kind:
        where.append("type = ?")
        args.append(kind)
    return " AND ".join(where) or "true", args


def matching_keys(con: Con, search: str, kind: str) -> list[str]:
    clause, args = _filter(search, kind)
    return [r[0] for r in con.execute(f"SELECT name_key FROM entities WHERE {clause}", args).fetchall()]


def names_page(con: Con, search: str, kind: str, descending: bool, limit: int, offset: int) -> tuple[list[str], int]:
    clause, args = _filter(search, kind)
    total = (con.execute(f"SELECT count(*) FROM entities WHERE {clause}", args).fetchone() or (0,))[0]
    keys = [r[0] for r in con.execute(
        f"SELECT name_key FROM entities WHERE {clause} ORDER BY lower(name) {'DESC' if descending else 'ASC'}, "
        "name_key LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()]
    return keys, total


def entity_types(con: Con) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in con.execute(
        "SELECT type, count(*) FROM entities GROUP BY type ORDER BY count(*) DESC, type LIMIT 100").fetchall()]


def entity_detail(con: Con, key: str, shown_chunks: int) -> dict[str, Any] | None:
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
                         [sources[:shown_chunks]]).fetchall()
    named = con.execute("SELECT alias_key, reason, evidence FROM aliases WHERE target_key = ? ORDER BY 1",
                        [key]).fetchall()
    aliases = [r[0] for r in named]
    edited = con.execute("SELECT 1 FROM entity_edits WHERE name_key = ?", [key]).fetchone() is not None
    return {
        "key": key, "name": row[0], "type": row[1], "description": row[2], "sources": sources,
        "created_at": row[4], "updated_at": row[5], "aliases": aliases, "edited": edited,
        "resolved": [{"alias": a, "reason": r, "evidence": e} for a, r, e in named if r],
        "documents": [{"id": d[0], "name": d[1], "chunks": d[2]} for d in documents],
        "chunks": [{"id": c[0], "content": c[1]} for c in chunks],
    }


class DuckDBGraphRows(SqlGraphRows):
    """``GraphRows`` (proxy/store/protocols/graph_rows.py) over one DuckDB database."""

    sql = sys.modules[__name__]

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.db: Database = db
