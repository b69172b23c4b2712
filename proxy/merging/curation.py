"""Curating the graph by hand: edit, rename, merge and delete entities; edit and delete relations.

Every operation is a recomputation, like ingestion: the touched names are rebuilt from their
source chunks' stored extractions under the (new) aliases and hand edits, and the result is
committed to all three stores in one changeset, under the pipeline's merge lock. Aliases and
edits are committed in the same transaction, so a merge or an edit survives re-ingestion:
a merged-away name keeps resolving to its target, an edited field stays edited.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.extraction.results import name_key, normalise_name
from proxy.merging.edits import Edits, EntityEdit, RelationEdit
from proxy.merging.recompute import Integrator, read_extractions
from proxy.merging.resolution import Link
from proxy.merging.rules import entity_state, index_result, relation_state
from proxy.store.changes import Changeset, Curation, pair_key
from proxy.store.store import KnowledgeStore

MAX_NAME = 200
MAX_TYPE = 64
MAX_DESCRIPTION = 20_000
MAX_MERGE = 50


@dataclass
class MergePlan:
    """What a merge (or a rename) will do, computed before anything is written."""
    target_key: str
    target_name: str
    merged: list[str]                                   # keys of the entities folded into the target
    merged_names: list[str] = field(default_factory=list)  # their names, for the preview
    type: str = ""
    description: str = ""
    will_summarise: bool = False
    relations: list[dict[str, Any]] = field(default_factory=list)   # the target's relations afterwards
    self_loops: list[str] = field(default_factory=list)             # pair keys dropped
    combined: int = 0                                               # relations folded into another
    entity_sources: dict[str, list[str]] = field(default_factory=dict)
    relation_sources: dict[str, list[str]] = field(default_factory=dict)
    relations_removed: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    aliases_before: dict[str, str] = field(default_factory=dict)
    edits: Edits = field(default_factory=Edits)


def clean_name(raw: Any) -> str:
    if not isinstance(raw, str) or not normalise_name(raw):
        raise BadRequest("a name is required")
    name = normalise_name(raw)
    if len(name) > MAX_NAME:
        raise BadRequest(f"a name can have at most {MAX_NAME} characters")
    return name


def clean_optional(raw: Any, label: str, limit: int) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise BadRequest(f"{label} must be text")
    text = " ".join(raw.split()) if label == "type" else raw.strip()
    if len(text) > limit:
        raise BadRequest(f"{label} can have at most {limit} characters")
    return text or None


def clean_keywords(raw: Any) -> list[str] | None:
    if raw is None:
        return None
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(k, str) for k in items):
        raise BadRequest("keywords must be a list of strings or comma-separated text")
    return list(dict.fromkeys(k.strip()[:MAX_TYPE * 2] for k in items if k.strip()))


def clean_weight(raw: Any) -> float | None:
    if raw is None or raw == "":
        return None
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        raise BadRequest("weight must be a number") from None
    if not 0 < weight <= 1_000_000:
        raise BadRequest("weight must be a positive number no larger than 1000000")
    return weight


class Curator:
    """``exclusive()`` is the merge lock: no document merges while a curation is computed and
    committed."""

    def __init__(self, store: KnowledgeStore, integrator: Integrator,
                 exclusive: Callable[[], AbstractAsyncContextManager[None]]) -> None:
        self.store = store
        self.tables = store.tables.graph_rows
        self.integrator = integrator
        self.exclusive = exclusive

    # --- merge and rename ---

    async def plan_merge(self, keys: list[str], target_name: Any, *, type: Any = None,
                         description: Any = None) -> MergePlan:
        """The preview: nothing is written."""
        name = clean_name(target_name)
        kind = clean_optional(type, "type", MAX_TYPE)
        text = clean_optional(description, "description", MAX_DESCRIPTION)
        keys = list(dict.fromkeys(k for k in keys if k))
        if not keys:
            raise BadRequest("pick at least one entity to merge")
        if len(keys) > MAX_MERGE:
            raise BadRequest(f"at most {MAX_MERGE} entities can be merged at once")
        target = name_key(name)
        rows = await self.tables.entities(sorted({*keys, target}))
        if missing := [k for k in keys if k not in rows]:
            raise NotFound(f"no entity {missing[0]!r}")
        merged = sorted(k for k in rows if k != target)
        if not merged:
            raise BadRequest("nothing to merge: the target is the only entity picked")
        plan = MergePlan(target, name, merged, [rows[k].name for k in merged])
        plan.aliases_before = await self.tables.aliases()
        plan.aliases = dict(plan.aliases_before)
        for alias, points_to in list(plan.aliases.items()):
            if points_to in merged:
                plan.aliases[alias] = target
        for key in merged:
            plan.aliases[key] = target
        plan.aliases.pop(target, None)  # the target may once have been merged away itself
        plan.entity_sources[target] = list(dict.fromkeys(s for r in rows.values() for s in r.source_ids))
        carried: dict[str, list[str]] = {}
        for relation in await self.tables.relations_touching(sorted(rows)):
            pair, a, b, sources = relation.pair, relation.source, relation.target, relation.source_ids
            a2, b2 = (target if a in rows else a), (target if b in rows else b)
            if a2 == b2:
                plan.self_loops.append(pair)
                plan.relations_removed.append(pair)
                continue
            new_pair = pair_key(a2, b2)
            carried.setdefault(new_pair, []).append(pair)
            plan.relation_sources[new_pair] = list(dict.fromkeys([*plan.relation_sources.get(new_pair, []), *sources]))
            if new_pair != pair:
                plan.relations_removed.append(pair)
        plan.combined = sum(len(old) - 1 for old in carried.values())
        plan.edits = await self._merged_edits(plan, rows, carried, kind, text)
        await self._preview(plan)
        return plan

    async def _merged_edits(self, plan: MergePlan, rows: dict[str, Any], carried: dict[str, list[str]],
                            kind: str | None, text: str | None) -> Edits:
        old = await self.integrator.edits(sorted(rows), sorted({p for ps in carried.values() for p in ps}))
        target_edit = old.entities.get(plan.target_key, EntityEdit())
        edits = Edits({plan.target_key: EntityEdit(plan.target_name, kind or target_edit.type,
                                                   text if text is not None else target_edit.description)})
        for new_pair, old_pairs in carried.items():  # an edited relation keeps its edit if it was not combined
            if len(old_pairs) == 1 and old_pairs[0] in old.relations:
                edits.relations[new_pair] = old.relations[old_pairs[0]]
        return edits

    async def _preview(self, plan: MergePlan) -> None:
        wanted = sorted({c for s in (*plan.entity_sources.values(), *plan.relation_sources.values()) for c in s})
        results = await read_extractions(self.tables, wanted)
        indexes = {chunk_id: index_result(result, plan.aliases) for chunk_id, result in results.items()}
        target = entity_state(plan.target_key, plan.target_name, plan.entity_sources[plan.target_key], indexes)
        relations = [relation_state(p, s, indexes) for p, s in plan.relation_sources.items()]
        fixed = plan.edits.apply([target], relations)
        plan.type = target.type
        settings = self.integrator.settings
        if 0 in fixed:
            plan.description = fixed[0]
        else:
            plan.description = "\n".join(target.fragments)
            plan.will_summarise = (len(target.fragments) >= settings.summary_fragments
                                   or self.integrator.tokenizer.count(plan.description) > settings.summary_tokens)
        endpoints = sorted({key for r in relations for key in (r.source, r.target)})
        stored = await anyio.to_thread.run_sync(self.store.entities_named_sync, endpoints)
        # the preview names the target by its new name, the others as stored
        names = {key: plan.target_name if key == plan.target_key else (m.name if (m := stored.get(key)) else key)
                 for key in endpoints}
        plan.relations = [{"pair": r.pair_key, "source": names[r.source], "target": names[r.target],
                           "weight": r.weight, "keywords": r.keywords, "sources": len(r.source_ids)}
                          for r in relations]

    async def merge_resolved(self, link: Link) -> dict[str, Any]:
        """Entity resolution's merge of two stored entities: ``link.alias`` into ``link.target``
        under the target's name, the evidence kept with the alias."""
        target = (await self.tables.entities([link.target])).get(link.target)
        if target is None or name_key(target.name) != link.target:
            raise NotFound(f"no entity {link.target!r} to merge {link.alias!r} into")
        return await self.merge([link.alias, link.target], target.name, why=(link.reason, link.evidence))

    async def merge(self, keys: list[str], target_name: Any, *, type: Any = None,
                    description: Any = None, why: tuple[str, str] | None = None) -> dict[str, Any]:
        """Merge ``keys`` into the entity ``target_name`` names; ``why`` (reason, evidence) marks
        entity resolution's merges, which the console can undo."""
        async with self.exclusive():
            plan = await self.plan_merge(keys, target_name, type=type, description=description)
            graph = await self.integrator.rebuild(plan.entity_sources, plan.relation_sources, plan.aliases,
                                                  plan.edits, plan.merged, plan.relations_removed)
            # the aliases this merge makes or points at the target (the others keep their rows: their evidence)
            new_aliases = {k: v for k, v in plan.aliases.items()
                           if v == plan.target_key and plan.aliases_before.get(k) != v}
            await self.store.apply(Changeset(
                entities_upserted=graph.entities, entities_removed=plan.merged,
                relations_upserted=graph.relations, relations_removed=plan.relations_removed,
                cache_entries=graph.cache_entries,
                curation=Curation(aliases=new_aliases, aliases_dropped=[plan.target_key],
                                  resolved={key: why for key in plan.merged} if why else {},
                                  entity_edits=dict(plan.edits.entities), relation_edits=dict(plan.edits.relations),
                                  entity_edits_dropped=list(plan.merged),
                                  relation_edits_dropped=list(plan.relations_removed))))
        return {"target": plan.target_key, "name": plan.target_name, "merged": plan.merged,
                "relations": len(plan.relation_sources), "self_loops_dropped": len(plan.self_loops),
                "relations_combined": plan.combined}

    async def undo_resolution(self, alias: str) -> dict[str, Any]:
        """Undo an alias (entity resolution's, or a merge by hand): the alias's name is its own entity
        again, rebuilt with its relations from the chunks that name it, and the pair is dismissed so
        that resolution does not fold it again."""
        async with self.exclusive():
            aliases = await self.tables.aliases()
            target = aliases.pop(alias, None)
            if target is None:
                raise NotFound(f"no alias {alias!r}")
            current = (await self.tables.entities([target])).get(target)
            touching = await self.tables.relations_touching([target])
            chunks = sorted({*(current.source_ids if current else ()), *(s for r in touching for s in r.source_ids)})
            indexes = {chunk_id: index_result(result, aliases)
                       for chunk_id, result in (await read_extractions(self.tables, chunks)).items()}
            entity_sources = {key: [c for c, index in indexes.items() if key in index.spellings]
                              for key in (target, alias)}
            relation_sources: dict[str, list[str]] = {}
            for chunk_id, index in indexes.items():
                for pair in index.relations:
                    if {*pair.split("\x1f", 1)} & {target, alias}:
                        relation_sources.setdefault(pair, []).append(chunk_id)
            gone = [key for key, sources in entity_sources.items() if not sources]
            entity_sources = {key: sources for key, sources in entity_sources.items() if sources}
            edits = await self.integrator.edits(sorted(entity_sources), sorted(relation_sources))
            removed = sorted({r.pair for r in touching} - set(relation_sources))
            graph = await self.integrator.rebuild(entity_sources, relation_sources, aliases, edits,
                                                  [key for key in gone if key == target and current], removed)
            await self.store.apply(Changeset(
                entities_upserted=graph.entities, entities_removed=graph.entities_removed,
                relations_upserted=graph.relations, relations_removed=removed,
                cache_entries=graph.cache_entries, curation=Curation(aliases_dropped=[alias])))
            await self.tables.dismiss(pair_key(alias, target))
        return {"alias": alias, "target": target, "entities": sorted(entity_sources)}

    # --- entities ---

    async def edit_entity(self, key: str, *, name: Any = None, type: Any = None,
                          description: Any = None) -> dict[str, Any]:
        """Change the name, type or description. A new name whose key differs is a rename (a merge
        into a new name); onto an existing entity it is refused with 409, so the caller can offer a merge."""
        new_name = clean_name(name) if name is not None else None
        kind = clean_optional(type, "type", MAX_TYPE)
        text = clean_optional(description, "description", MAX_DESCRIPTION) if description is not None else None
        current = (await self.tables.entities([key])).get(key)
        if current is None:
            raise NotFound(f"no entity {key!r}")
        if new_name is not None and name_key(new_name) != key:
            existing = (await self.tables.entities([name_key(new_name)])).get(name_key(new_name))
            if existing is not None:
                raise Conflict(f"an entity named {existing.name!r} already exists: merge into it instead")
            return await self.merge([key], new_name, type=kind, description=text)
        async with self.exclusive():
            # read again under the lock: a document merged meanwhile may have added sources
            current = (await self.tables.entities([key])).get(key)
            if current is None:
                raise NotFound(f"no entity {key!r}")
            old = (await self.integrator.edits([key], [])).entities.get(key, EntityEdit())
            edit = EntityEdit(new_name or old.name, kind or old.type,
                              text if description is not None else old.description)
            relation_sources = {}
            if edit.name and edit.name != current.name:  # relation texts name their endpoints
                relation_sources = {r.pair: r.source_ids for r in await self.tables.relations_touching([key])}
            graph = await self.integrator.rebuild({key: current.source_ids}, relation_sources,
                                                  await self.tables.aliases(), Edits({key: edit}), [], [])
            await self.store.apply(Changeset(
                entities_upserted=graph.entities, relations_upserted=graph.relations,
                cache_entries=graph.cache_entries, curation=Curation(entity_edits={key: edit})))
        return {"target": key, "name": edit.name or current.name, "merged": []}

    async def delete_entity(self, key: str) -> dict[str, Any]:
        async with self.exclusive():
            if key not in await self.tables.entities([key]):
                raise NotFound(f"no entity {key!r}")
            pairs = [r.pair for r in await self.tables.relations_touching([key])]
            await self.store.apply(Changeset(
                entities_removed=[key], relations_removed=pairs,
                curation=Curation(entity_edits_dropped=[key], relation_edits_dropped=pairs,
                                  aliases_into_dropped=[key])))
        return {"deleted": key, "relations_removed": len(pairs)}

    # --- relations ---

    async def edit_relation(self, pair: str, *, keywords: Any = None, description: Any = None,
                            weight: Any = None) -> dict[str, Any]:
        words = clean_keywords(keywords)
        text = clean_optional(description, "description", MAX_DESCRIPTION) if description is not None else None
        value = clean_weight(weight)
        async with self.exclusive():
            row = await self.tables.relation(pair)
            if row is None:
                raise NotFound("no such relation")
            old = (await self.integrator.edits([], [pair])).relations.get(pair, RelationEdit())
            edit = RelationEdit(words if words is not None else old.keywords,
                                text if description is not None else old.description,
                                value if value is not None else old.weight)
            graph = await self.integrator.rebuild({}, {pair: row.source_ids}, await self.tables.aliases(),
                                                  Edits(relations={pair: edit}), [], [])
            await self.store.apply(Changeset(
                relations_upserted=graph.relations, cache_entries=graph.cache_entries,
                curation=Curation(relation_edits={pair: edit})))
        return {"pair": pair}

    async def delete_relation(self, pair: str) -> dict[str, Any]:
        async with self.exclusive():
            if await self.tables.relation(pair) is None:
                raise NotFound("no such relation")
            await self.store.apply(Changeset(relations_removed=[pair],
                                             curation=Curation(relation_edits_dropped=[pair])))
        return {"deleted": pair}
