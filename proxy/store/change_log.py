"""A committed changeset as JSON, for the other replicas of a shared store: what they need to apply
the commit to their in-memory rows, graph, name and keyword indexes (``KnowledgeStore.replay``).
Embeddings are left out (they are in the tables, searched there), and so are what only the tables
need (document statuses, cache entries, hand edits)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from proxy.store.changes import Changeset, ChunkRow, CommunityRow, Curation, EntityRow, IndexDelta, RelationRow

NO_VECTOR = np.empty(0, dtype=np.float32)


def _without_embedding(row: Any) -> dict[str, Any]:
    fields = asdict(row)
    fields.pop("embedding")
    return fields


def encode(changes: Changeset, deltas: dict[str, IndexDelta]) -> dict[str, Any]:
    """After the commit assigned the rows' vector keys."""
    curation = changes.curation
    return {
        "chunks_added": [_without_embedding(c) for c in changes.chunks_added],
        "chunks_removed": changes.chunks_removed,
        "links_added": [list(link) for link in changes.links_added],
        "documents_removed": changes.documents_removed,
        "entities_upserted": [_without_embedding(e) for e in changes.entities_upserted],
        "entities_removed": changes.entities_removed,
        "relations_upserted": [_without_embedding(r) for r in changes.relations_upserted],
        "relations_removed": changes.relations_removed,
        "communities_upserted": [_without_embedding(c) for c in changes.communities_upserted],
        "communities_removed": changes.communities_removed,
        "aliases": curation.aliases, "aliases_dropped": curation.aliases_dropped,
        "aliases_into_dropped": curation.aliases_into_dropped,
        "resolved": {alias: list(why) for alias, why in curation.resolved.items()},
        "resolved_into_dropped": curation.resolved_into_dropped,
        "deltas": {name: {"added": [int(k) for k in d.added_keys], "removed": [int(k) for k in d.removed_keys],
                          "linked_chunks": d.linked_chunks} for name, d in deltas.items()},
    }


def decode(data: dict[str, Any]) -> tuple[Changeset, dict[str, IndexDelta]]:
    """The changeset and deltas ``encode`` wrote, embeddings empty."""
    changes = Changeset(
        chunks_added=[ChunkRow(**c, embedding=NO_VECTOR) for c in data["chunks_added"]],
        chunks_removed=data["chunks_removed"],
        links_added=[(d, c, int(o)) for d, c, o in data["links_added"]],
        documents_removed=data["documents_removed"],
        entities_upserted=[EntityRow(**e, embedding=NO_VECTOR) for e in data["entities_upserted"]],
        entities_removed=data["entities_removed"],
        relations_upserted=[RelationRow(**r, embedding=NO_VECTOR) for r in data["relations_upserted"]],
        relations_removed=data["relations_removed"],
        communities_upserted=[CommunityRow(**c, embedding=NO_VECTOR) for c in data["communities_upserted"]],
        communities_removed=data["communities_removed"],
        curation=Curation(aliases=data["aliases"], aliases_dropped=data["aliases_dropped"],
                          aliases_into_dropped=data["aliases_into_dropped"],
                          resolved={alias: (why[0], why[1]) for alias, why in data.get("resolved", {}).items()},
                          resolved_into_dropped=data.get("resolved_into_dropped", [])))
    deltas = {name: IndexDelta(added_keys=d["added"], added_vectors=[NO_VECTOR] * len(d["added"]),
                               removed_keys=d["removed"], linked_chunks=d["linked_chunks"])
              for name, d in data["deltas"].items()}
    return changes, deltas
