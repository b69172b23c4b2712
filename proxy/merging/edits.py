"""Hand edits from the console, kept apart from what extraction says.

An entity or relation is recomputed from its source chunks whenever a document touching it is
added or removed; an edit stored here is laid over the recomputed state each time, so a name,
type, description, keyword list or weight set by hand survives re-ingestion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.merging.rules import EntityState, RelationState
from proxy.store.changes import (  # committed with a changeset (``Curation``)
    EntityEdit,
    RelationEdit,
)

__all__ = ["Edits", "EntityEdit", "RelationEdit"]


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

