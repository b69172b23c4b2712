"""The graph's rows over either backend (``GraphRows``, proxy/store/protocols/graph_rows.py): entities,
relations, extraction results, aliases, hand edits, dismissed suggestions and the console's entity
queries; and ``write_curation``, which the commit writer runs for a changeset's aliases and edits.
Written once in the SQL both engines speak (proxy/store/sql_dialect.py); a backend adds how it reads
embeddings as a matrix (``sql``). Text is ordered with ``COLLATE "C"`` (code point order, Python's
``sorted``), whatever a server's default collation."""

from __future__ import annotations

from datetime import datetime
from types import ModuleType
from typing import Any

import numpy as np

from proxy.store.changes import Curation, EntityEdit, RelationEdit
from proxy.store.clock import now
from proxy.store.protocols.graph_rows import StoredEdits, StoredEntity, StoredRelation, StoredRow, Subject
from proxy.store.sql_dialect import Sql, containing
from proxy.store.sql_retrieval_rows import ID_COLUMN, descriptions, extractions
from proxy.store.sql_runner import SqlAdapter

# --- recomputing the graph ---


def load_aliases(sql: Sql) -> dict[str, str]:
    return dict(sql.execute("SELECT alias_key, target_key FROM aliases").fetchall())


def touched_by(sql: Sql, chunk_ids: list[str]) -> tuple[set[str], set[str]]:
    if not chunk_ids:
        return set(), set()
    entities = {r[0] for r in sql.execute(
        f"SELECT name_key FROM entities WHERE {sql.overlaps('source_ids', 'text')}", [list(chunk_ids)]).fetchall()}
    pairs = {r[0] for r in sql.execute(
        f"SELECT pair_key FROM relations WHERE {sql.overlaps('source_ids', 'text')}", [list(chunk_ids)]).fetchall()}
    return entities, pairs


def stored_rows(sql: Sql, table: Subject, keys: list[str]) -> dict[str, StoredRow]:
    if not keys:
        return {}
    name = "name" if table == "entities" else "''"
    id_column = ID_COLUMN[table]   # the table's name is one of two, never a caller's text
    rows = sql.execute(f"SELECT {id_column}, {name}, source_ids, key, embed_hash FROM {table} "
                       f"WHERE {sql.among(id_column, 'text')}", [list(keys)]).fetchall()
    return {r[0]: StoredRow(r[1], list(r[2]), r[3], r[4]) for r in rows}


def load_edits(sql: Sql, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits:
    edits = StoredEdits({}, {})
    if entity_keys:
        for key, name, kind, description in sql.execute(
                f"SELECT name_key, name, type, description FROM entity_edits WHERE {sql.among('name_key', 'text')}",
                [list(entity_keys)]).fetchall():
            edits.entities[key] = EntityEdit(name, kind, description)
    if pair_keys:
        for pair, keywords, description, weight in sql.execute(
                "SELECT pair_key, keywords, description, weight FROM relation_edits "
                f"WHERE {sql.among('pair_key', 'text')}", [list(pair_keys)]).fetchall():
            edits.relations[pair] = RelationEdit(list(keywords) if keywords is not None else None, description,
                                                 weight)
    return edits


# --- curation ---

def entity_rows(sql: Sql, keys: list[str]) -> dict[str, StoredEntity]:
    rows = sql.execute("SELECT name_key, name, type, description, source_ids FROM entities "
                       f"WHERE {sql.among('name_key', 'text')}", [list(keys)]).fetchall()
    return {r[0]: StoredEntity(r[1], r[2], r[3], list(r[4])) for r in rows}


def relations_touching(sql: Sql, keys: list[str]) -> list[StoredRelation]:
    return [StoredRelation(r[0], r[1], r[2], list(r[3])) for r in sql.execute(
        "SELECT pair_key, source, target, source_ids FROM relations "
        f"WHERE {sql.among('source', 'text')} OR {sql.among('target', 'text')} "
        'ORDER BY pair_key COLLATE "C"', [list(keys), list(keys)]).fetchall()]


def relation_row(sql: Sql, pair: str) -> StoredRelation | None:
    row = sql.execute("SELECT source, target, source_ids FROM relations WHERE pair_key = ?", [pair]).fetchone()
    return StoredRelation(pair, row[0], row[1], list(row[2])) if row else None


def dismissed(sql: Sql) -> set[str]:
    return {r[0] for r in sql.execute("SELECT pair_key FROM dismissed_suggestions").fetchall()}


def dismiss(sql: Sql, pair: str, stamp: datetime) -> None:
    sql.execute("INSERT INTO dismissed_suggestions VALUES (?, ?) "
                "ON CONFLICT (pair_key) DO UPDATE SET created_at = excluded.created_at", [pair, stamp])


def write_curation(sql: Sql, curation: Curation, stamp: datetime) -> None:
    """A changeset's aliases and hand edits, in its transaction (see ``Changeset.curation``). In this
    order: an alias just written into a target losing its aliases goes too."""
    if curation.aliases_dropped:
        sql.execute(f"DELETE FROM aliases WHERE {sql.among('alias_key', 'text')}", [list(curation.aliases_dropped)])
    if curation.aliases:
        # an alias a merge points elsewhere keeps the reason and evidence it was made with
        sql.executemany(
            "INSERT INTO aliases (alias_key, target_key, created_at, reason, evidence) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (alias_key) DO UPDATE "
            "SET target_key = excluded.target_key, created_at = excluded.created_at, "
            "reason = CASE WHEN excluded.reason = '' THEN aliases.reason ELSE excluded.reason END, "
            "evidence = CASE WHEN excluded.reason = '' THEN aliases.evidence ELSE excluded.evidence END",
            [(alias, target, stamp, *curation.resolved.get(alias, ("", "")))
             for alias, target in curation.aliases.items()])
    for table, column, keys, only in (
            ("entity_edits", "name_key", curation.entity_edits_dropped, ""),
            ("relation_edits", "pair_key", curation.relation_edits_dropped, ""),
            ("aliases", "target_key", curation.aliases_into_dropped, ""),
            ("aliases", "target_key", curation.resolved_into_dropped, "reason <> '' AND ")):
        if keys:
            sql.execute(f"DELETE FROM {table} WHERE {only}{sql.among(column, 'text')}", [list(keys)])
    if curation.entity_edits:
        sql.executemany(
            "INSERT INTO entity_edits VALUES (?, ?, ?, ?, ?) ON CONFLICT (name_key) DO UPDATE "
            "SET name = excluded.name, type = excluded.type, description = excluded.description, "
            "updated_at = excluded.updated_at",
            [(key, edit.name, edit.type, edit.description, stamp) for key, edit in curation.entity_edits.items()])
    if curation.relation_edits:
        sql.executemany(
            "INSERT INTO relation_edits VALUES (?, ?::text[], ?, ?, ?) ON CONFLICT (pair_key) DO UPDATE "
            "SET keywords = excluded.keywords, description = excluded.description, weight = excluded.weight, "
            "updated_at = excluded.updated_at",
            [(pair, edit.keywords, edit.description, edit.weight, stamp)
             for pair, edit in curation.relation_edits.items()])


# --- the console's and the API's entity queries ---

def alias_target(sql: Sql, key: str) -> str | None:
    if sql.unstorable(key):
        return None
    row = sql.execute("SELECT target_key FROM aliases WHERE alias_key = ?", [key]).fetchone()
    return row[0] if row else None


def resolve_name(sql: Sql, name_key: str) -> str | None:
    if sql.unstorable(name_key):
        return None
    row = sql.execute("SELECT name_key FROM entities WHERE name_key = ?", [name_key]).fetchone()
    if row:
        return row[0]
    return alias_target(sql, name_key)


def _filter(sql: Sql, search: str, kind: str) -> tuple[str, list[Any]]:
    if sql.unstorable(search, kind):   # no name or type holds what the engine cannot store
        return "false", []
    where, args = [], []
    if search:
        where.append("name ILIKE ? ESCAPE '\\'")
        args.append(containing(search))
    if kind:
        where.append("type = ?")
        args.append(kind)
    return " AND ".join(where) or "true", args


def matching_keys(sql: Sql, search: str, kind: str) -> list[str]:
    clause, args = _filter(sql, search, kind)
    return [r[0] for r in sql.execute(f"SELECT name_key FROM entities WHERE {clause}", args).fetchall()]


def names_page(sql: Sql, search: str, kind: str, descending: bool, limit: int, offset: int) -> tuple[list[str], int]:
    clause, args = _filter(sql, search, kind)
    total = int(sql.one(f"SELECT count(*) FROM entities WHERE {clause}", args))
    keys = [r[0] for r in sql.execute(
        f'SELECT name_key FROM entities WHERE {clause} ORDER BY lower(name) COLLATE "C" '
        f'{"DESC" if descending else "ASC"}, name_key COLLATE "C" LIMIT ? OFFSET ?', [*args, limit, offset]).fetchall()]
    return keys, total


def entity_types(sql: Sql) -> list[tuple[str, int]]:
    return [(r[0], int(r[1])) for r in sql.execute(
        'SELECT type, count(*) FROM entities GROUP BY type ORDER BY count(*) DESC, type COLLATE "C" LIMIT 100'
    ).fetchall()]


def entity_detail(sql: Sql, key: str, shown_chunks: int) -> dict[str, Any] | None:
    if sql.unstorable(key):
        return None
    row = sql.execute("SELECT name, type, description, source_ids, created_at, updated_at FROM entities "
                      "WHERE name_key = ?", [key]).fetchone()
    if row is None:
        return None
    sources = list(row[3])
    documents = sql.execute(f"""
        SELECT d.id, d.name, count(*) FROM document_chunks dc JOIN documents d ON d.id = dc.document_id
        WHERE {sql.among('dc.chunk_id', 'text')} GROUP BY d.id, d.name ORDER BY d.name COLLATE "C" """,
                            [sources]).fetchall()
    chunks = sql.execute(f"SELECT id, content FROM chunks WHERE {sql.among('id', 'text')}",
                         [sources[:shown_chunks]]).fetchall()
    named = sql.execute('SELECT alias_key, reason, evidence FROM aliases WHERE target_key = ? '
                        'ORDER BY alias_key COLLATE "C"', [key]).fetchall()
    aliases = [r[0] for r in named]
    edited = sql.execute("SELECT 1 FROM entity_edits WHERE name_key = ?", [key]).fetchone() is not None
    return {
        "key": key, "name": row[0], "type": row[1], "description": row[2], "sources": sources,
        "created_at": row[4], "updated_at": row[5], "aliases": aliases, "edited": edited,
        "resolved": [{"alias": a, "reason": r, "evidence": e} for a, r, e in named if r],
        "documents": [{"id": d[0], "name": d[1], "chunks": int(d[2])} for d in documents],
        "chunks": [{"id": c[0], "content": c[1]} for c in chunks],
    }


class SqlGraphRows(SqlAdapter):
    """``GraphRows`` over either backend (see the module's docstring)."""

    sql: ModuleType   # the backend's ``embeddings_by(sql, table, keys)``

    async def aliases(self) -> dict[str, str]:
        return await self.read(load_aliases)

    def aliases_sync(self) -> dict[str, str]:
        return self.read_sync(load_aliases)

    async def touched_by(self, chunk_ids: list[str]) -> tuple[set[str], set[str]]:
        return await self.read(touched_by, chunk_ids)

    async def stored_rows(self, subject: Subject, keys: list[str]) -> dict[str, StoredRow]:
        return await self.read(stored_rows, subject, keys)

    async def embeddings(self, subject: Subject, keys: list[str]) -> np.ndarray:
        return await self.read(self.sql.embeddings_by, subject, keys)

    async def extractions(self, chunk_ids: list[str]) -> dict[str, str]:
        return await self.read(extractions, chunk_ids)

    async def edits(self, entity_keys: list[str], pair_keys: list[str]) -> StoredEdits:
        return await self.read(load_edits, entity_keys, pair_keys)

    async def entities(self, keys: list[str]) -> dict[str, StoredEntity]:
        return await self.read(entity_rows, keys)

    async def relations_touching(self, keys: list[str]) -> list[StoredRelation]:
        return await self.read(relations_touching, keys)

    async def relation(self, pair: str) -> StoredRelation | None:
        return await self.read(relation_row, pair)

    def dismissed_sync(self) -> set[str]:
        return self.read_sync(dismissed)

    async def dismiss(self, pair: str) -> None:
        await self.write(dismiss, pair, now())

    async def alias_target(self, key: str) -> str | None:
        return await self.read(alias_target, key)

    async def resolve_name(self, key: str) -> str | None:
        return await self.read(resolve_name, key)

    async def matching_keys(self, search: str, kind: str) -> list[str]:
        return await self.read(matching_keys, search, kind)

    async def names_page(self, search: str, kind: str, descending: bool, limit: int,
                         offset: int) -> tuple[list[str], int]:
        return await self.read(names_page, search, kind, descending, limit, offset)

    async def entity_types(self) -> list[tuple[str, int]]:
        return await self.read(entity_types)

    async def entity_detail(self, key: str, shown_chunks: int) -> dict[str, Any] | None:
        return await self.read(entity_detail, key, shown_chunks)

    async def descriptions(self, subject: Subject, wanted: list[tuple[int, str]]) -> dict[int, str]:
        return await self.read(descriptions, subject, wanted)
