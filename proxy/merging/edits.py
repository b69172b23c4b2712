"""Hand edits from the console, kept apart from what extraction says.

An entity or relation is recomputed from its source chunks whenever a document touching it is
added or removed; an edit stored here is laid over the recomputed state each time, so a name,
type, description, keyword list or weight set by hand survives re-ingestion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.store.duckdb.connection import Con
from proxy.merging.rules import EntityState, RelationState


@dataclass
class EntityEdit:
    name: str | None = None
    type: str | None = None
    description: str | None = None


@dataclass
class RelationEdit:
    keywords: list[str] | None = None
    description: str | None = None
    weight: float | None = None


@dataclass
class Edits:
    entities: dict[str, EntityEdit] = field(default_factory=dict)     # by name key
    relations: dict[str, RelationEdit] = field(default_factory=dict)  # by pair key

    def apply(self, entities: list[EntityState], relations: list[RelationState]) -> dict[int, str]:
        """Lay the edits over the states; returns the descriptions fixed by hand, by position
        (entities first, then relations: the order the descriptions are built in)."""
        fixed: dict[int, str] = {}
        for i, state in enumerate(entities):
            edit = self.entities.get(state.name_key)
            if edit is None:
                continue
            state.name = edit.name or state.name
            state.type = edit.type or state.type
            if edit.description is not None:
                fixed[i] = edit.description
        for i, rel in enumerate(relations, start=len(entities)):
            redit = self.relations.get(rel.pair_key)
            if redit is None:
                continue
            if redit.keywords is not None:
                rel.keywords = list(redit.keywords)
            if redit.weight is not None:
                rel.weight = redit.weight
            if redit.description is not None:
                fixed[i] = redit.description
        return fixed


def load_edits(con: Con, entity_keys: list[str], pair_keys: list[str]) -> Edits:
    edits = Edits()
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


def save_entity_edit(con: Con, key: str, edit: EntityEdit, stamp: Any) -> None:
    con.execute("INSERT OR REPLACE INTO entity_edits VALUES (?, ?, ?, ?, ?)",
                [key, edit.name, edit.type, edit.description, stamp])


def save_relation_edit(con: Con, pair: str, edit: RelationEdit, stamp: Any) -> None:
    con.execute("INSERT OR REPLACE INTO relation_edits VALUES (?, ?, ?, ?, ?)",
                [pair, edit.keywords, edit.description, edit.weight, stamp])


def drop_edits(con: Con, entity_keys: list[str], pair_keys: list[str]) -> None:
    if entity_keys:
        con.execute("DELETE FROM entity_edits WHERE name_key IN (SELECT unnest(?::VARCHAR[]))", [entity_keys])
    if pair_keys:
        con.execute("DELETE FROM relation_edits WHERE pair_key IN (SELECT unnest(?::VARCHAR[]))", [pair_keys])
