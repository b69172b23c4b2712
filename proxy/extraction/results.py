"""What extraction yields: entities and relations, name keys, and a tolerant parser of the model's replies.

Pure functions only; the caller sends the messages upstream (with ``format=extraction_schema()``)
and hands the reply's content to :func:`parse_extraction`.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_ENTITY_TYPES: tuple[str, ...] = (
    "Person", "Creature", "Organization", "Location", "Event", "Concept",
    "Method", "Content", "Data", "Artifact", "NaturalObject",
)
OTHER = "Other"

NAME_MAX = 120
TYPE_MAX = 40
DESCRIPTION_MAX = 2000
KEYWORD_MAX = 60
KEYWORDS_PER_RELATION = 12
WEIGHT_MIN, WEIGHT_MAX, WEIGHT_DEFAULT = 0.1, 10.0, 1.0


class ExtractionFormatError(ValueError):
    """The model's reply holds no usable JSON object."""


@dataclass(frozen=True)
class ExtractedEntity:
    name: str
    type: str
    description: str


@dataclass(frozen=True)
class ExtractedRelation:
    source: str
    target: str
    keywords: tuple[str, ...]
    description: str
    weight: float


@dataclass(frozen=True)
class ExtractionResult:
    entities: tuple[ExtractedEntity, ...] = ()
    relations: tuple[ExtractedRelation, ...] = ()
    dropped: tuple[int, int] = (0, 0)   # entities and relations over the chunk's cap (``capped``)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "entities": [{"name": e.name, "type": e.type, "description": e.description}
                         for e in self.entities],
            "relations": [{"source": r.source, "target": r.target, "keywords": list(r.keywords),
                           "description": r.description, "weight": r.weight}
                          for r in self.relations],
        }
        if any(self.dropped):   # kept with the chunk's record: the document's merge says so
            data["dropped"] = {"entities": self.dropped[0], "relations": self.dropped[1]}
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> ExtractionResult:
        try:
            data = json.loads(raw)
            entities = tuple(ExtractedEntity(str(e["name"]), str(e["type"]), str(e["description"]))
                             for e in data["entities"])
            relations = tuple(ExtractedRelation(str(r["source"]), str(r["target"]),
                                                tuple(str(k) for k in r["keywords"]),
                                                str(r["description"]), float(r["weight"]))
                              for r in data["relations"])
            dropped = data.get("dropped") or {}
            over = (int(dropped.get("entities", 0)), int(dropped.get("relations", 0)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ExtractionFormatError(f"not a stored extraction result: {exc!r}") from None
        return cls(entities, relations, over)

    def is_empty(self) -> bool:
        return not self.entities and not self.relations


# --- schema and prompts -------------------------------------------------------------------


# --- string normalisation ---------------------------------------------------------------

_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">", "\"": "\"", "'": "'", "`": "`",
          "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb", "\u300c": "\u300d"}
_EMPHASIS = ("**", "*", "`")
_KEYWORD_SPLIT = re.compile(r"[,;\uff0c\uff1b\u3001]")


def _clean(value: str) -> str:
    """Control characters removed; whitespace trimmed and collapsed."""
    if not value.isprintable():
        value = "".join(ch for ch in value if ch.isspace() or unicodedata.category(ch) != "Cc")
    return " ".join(value.split())


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word boundary when one is near the end."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    if text[limit] != " " and space >= limit * 2 // 3:
        head = head[:space]
    return head.rstrip()


def _balanced(inner: str, opening: str, closing: str) -> bool:
    depth = 0
    for ch in inner:
        depth += (ch == opening) - (ch == closing)
        if depth < 0:
            return False
    return depth == 0


def _unwrap_once(text: str) -> str:
    for mark in _EMPHASIS:
        n = len(mark)
        inner = text[n:-n]
        wrapped = len(text) > 2 * n and text.startswith(mark) and text.endswith(mark)
        if wrapped and mark not in inner:
            return inner.strip()
    closing = _PAIRS.get(text[:1])
    if closing and len(text) >= 2 and text.endswith(closing):
        inner = text[1:-1]
        ok = _balanced(inner, text[0], closing) if text[0] != closing else closing not in inner
        if ok:
            return inner.strip()
    return text


def normalise_name(name: str) -> str:
    # names recur in every reply that mentions them: the usual, short ones are normalised once
    return _normalise_cached(name) if len(name) <= 256 else _normalise(name)


@functools.lru_cache(maxsize=65536)
def _normalise_cached(name: str) -> str:
    return _normalise(name)


def _normalise(name: str) -> str:
    text = _clean(name)
    while True:
        shorter = _cut(_unwrap_once(text), NAME_MAX)
        if shorter == text:
            return text
        text = shorter


def name_key(name: str) -> str:
    return normalise_name(name).casefold()


def _type_key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).casefold()


@functools.lru_cache(maxsize=4096)
def _match_type(raw: str, entity_types: Sequence[str]) -> str:
    key = _type_key(_cut(normalise_name(raw), TYPE_MAX))
    for known in entity_types:
        if key and _type_key(known) == key:
            return known
    return OTHER


def _keywords(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        items: Iterable[Any] = _KEYWORD_SPLIT.split(raw)
    elif isinstance(raw, list):
        items = raw
    else:
        return ()
    cleaned = (_cut(normalise_name(k), KEYWORD_MAX) for k in items if isinstance(k, str))
    return _union_keywords(cleaned)


def _union_keywords(keywords: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for keyword in keywords:
        if keyword and keyword.casefold() not in seen:
            seen[keyword.casefold()] = keyword
    return tuple(seen.values())[:KEYWORDS_PER_RELATION]


def _weight(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        return WEIGHT_DEFAULT
    try:
        value = float(raw)
    except OverflowError:  # an int too large for a float
        value = math.inf if int(raw) > 0 else -math.inf
    except ValueError:
        return WEIGHT_DEFAULT
    if math.isnan(value):
        return WEIGHT_DEFAULT
    return min(WEIGHT_MAX, max(WEIGHT_MIN, value))


def _optional_text(item: dict, field: str, limit: int) -> str | None:
    """The field as a cleaned string ('' when missing or null); None when it has a wrong type."""
    value = item.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        return None
    return _cut(_clean(value), limit)


# --- combining ------------------------------------------------------------------------------


def _merge_entities(old: ExtractedEntity, new: ExtractedEntity) -> ExtractedEntity:
    kept, other = (new, old) if len(new.description) > len(old.description) else (old, new)
    kind = other.type if kept.type == OTHER and other.type != OTHER else kept.type
    return ExtractedEntity(old.name, kind, kept.description)


def _merge_relations(old: ExtractedRelation, new: ExtractedRelation) -> ExtractedRelation:
    kept = new if len(new.description) > len(old.description) else old
    return ExtractedRelation(kept.source, kept.target, _union_keywords(old.keywords + new.keywords),
                             kept.description, max(old.weight, new.weight))


class _Collector:
    """Entities and relations keyed case-insensitively; the first spelling of a name wins."""

    def __init__(self) -> None:
        self.spelling: dict[str, str] = {}
        self.entities: dict[str, ExtractedEntity] = {}
        self.relations: dict[tuple[str, str], ExtractedRelation] = {}  # unordered pair of keys

    def canonical(self, name: str) -> tuple[str, str]:
        key = name_key(name)
        return key, self.spelling.setdefault(key, name)

    def add_entity(self, entity: ExtractedEntity) -> None:
        key, name = self.canonical(entity.name)
        entity = ExtractedEntity(name, entity.type, entity.description)
        old = self.entities.get(key)
        self.entities[key] = _merge_entities(old, entity) if old else entity

    def add_relation(self, relation: ExtractedRelation) -> None:
        if name_key(relation.source) == name_key(relation.target):
            return
        source_key, source = self.canonical(relation.source)
        target_key, target = self.canonical(relation.target)
        relation = ExtractedRelation(source, target, relation.keywords, relation.description,
                                     relation.weight)
        pair = (min(source_key, target_key), max(source_key, target_key))
        old = self.relations.get(pair)
        self.relations[pair] = _merge_relations(old, relation) if old else relation

    def result(self) -> ExtractionResult:
        return ExtractionResult(tuple(self.entities.values()), tuple(self.relations.values()))


def merge_passes(first: ExtractionResult, second: ExtractionResult) -> ExtractionResult:
    """The main pass and a gleaning pass combined; the main pass's spellings win."""
    collector = _Collector()
    for result in (first, second):
        for entity in result.entities:
            collector.add_entity(entity)
        for relation in result.relations:
            collector.add_relation(relation)
    merged = collector.result()
    return ExtractionResult(merged.entities, merged.relations,
                            (first.dropped[0] + second.dropped[0], first.dropped[1] + second.dropped[1]))


# --- what one chunk may contribute --------------------------------------------------------------

# Every entity is named in its chunk, and a name takes at least one of its tokens: a chunk of N
# tokens names at most N entities, and a real model finds a few dozen in a chunk of a thousand. A
# relation joins two of them; a model relates each entity to a few others, not to all. So a chunk
# keeps at most one entity per token and two relations per token (never fewer than CAP_FLOOR: a
# document's last chunk may be a line); a reply of 20,000 entities for one chunk, which took a
# minute to merge, is cut there, and the document says so (``capped_note``).
ENTITIES_PER_TOKEN, RELATIONS_PER_TOKEN = 1, 2
CAP_FLOOR = 64


def chunk_caps(tokens: int) -> tuple[int, int]:
    """The most entities and relations a chunk of ``tokens`` tokens may contribute."""
    return max(CAP_FLOOR, ENTITIES_PER_TOKEN * tokens), max(CAP_FLOOR, RELATIONS_PER_TOKEN * tokens)


def capped(result: ExtractionResult, tokens: int) -> ExtractionResult:
    """``result`` within the caps of a chunk of ``tokens`` tokens: the first entities in the reply's
    order, then the relations between kept entities before the others, as long as the entities
    they name but the reply does not list (made by the merge) stay within the cap too; what is cut
    is counted."""
    most_entities, most_relations = chunk_caps(tokens)
    if len(result.entities) <= most_entities and len(result.relations) <= most_relations and \
            len(_named(result.entities, result.relations)) <= most_entities:
        return result
    entities = result.entities[:most_entities]
    named = {name_key(e.name) for e in entities}
    inside = sorted(result.relations, key=lambda r: not {name_key(r.source), name_key(r.target)} <= named)
    relations: list[ExtractedRelation] = []
    for relation in inside:
        if len(relations) == most_relations:
            break
        new = {name_key(relation.source), name_key(relation.target)} - named
        if len(named) + len(new) <= most_entities:
            named |= new
            relations.append(relation)
    return ExtractionResult(entities, tuple(relations),
                            (result.dropped[0] + len(result.entities) - len(entities),
                             result.dropped[1] + len(result.relations) - len(relations)))


def _named(entities: Iterable[ExtractedEntity], relations: Iterable[ExtractedRelation]) -> set[str]:
    """The keys of every entity listed or named by a relation."""
    return {name_key(e.name) for e in entities} | {name_key(n) for r in relations for n in (r.source, r.target)}


def capped_note(results: Iterable[ExtractionResult]) -> str | None:
    """What a document's status says when some of its chunks' extractions were cut (None: none were)."""
    cut = [r.dropped for r in results if any(r.dropped)]
    if not cut:
        return None
    entities, relations = sum(d[0] for d in cut), sum(d[1] for d in cut)
    return (f"the model's extraction was cut in {len(cut)} chunk{'s' if len(cut) > 1 else ''}: {entities} entities "
            f"and {relations} relations left out (a chunk keeps at most {ENTITIES_PER_TOKEN} entity and "
            f"{RELATIONS_PER_TOKEN} relations per token of its text, at least {CAP_FLOOR})")


# --- parsing the reply ------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_FAILED = object()


def _try_decode(text: str) -> Any:
    text = text.strip()
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    start = text.find("{")
    if start < 0:
        return _FAILED
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except (ValueError, RecursionError):
        return _FAILED


def _decode_object(content: str) -> dict:
    text = _THINK.sub("", content)
    fenced = _FENCE.search(text)
    candidates = ([fenced.group(1)] if fenced else []) + [text]
    problem = "the reply holds no complete JSON object"
    for candidate in candidates:
        value = _try_decode(candidate)
        if isinstance(value, dict):
            return value
        if value is not _FAILED:
            problem = f"expected a JSON object, got {type(value).__name__}"
    raise ExtractionFormatError(problem)


def _items(data: dict, field: str) -> list[dict]:
    value = data.get(field)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _parse_entity(item: dict, entity_types: Sequence[str]) -> ExtractedEntity | None:
    name, kind = item.get("name"), item.get("type")
    description = _optional_text(item, "description", DESCRIPTION_MAX)
    if not isinstance(name, str) or description is None or not isinstance(kind, (str, type(None))):
        return None
    name = normalise_name(name)
    if not name:
        return None
    return ExtractedEntity(name, _match_type(kind or "", tuple(entity_types)), description)


def _parse_relation(item: dict) -> ExtractedRelation | None:
    source, target = item.get("source"), item.get("target")
    description = _optional_text(item, "description", DESCRIPTION_MAX)
    if not isinstance(source, str) or not isinstance(target, str) or description is None:
        return None
    source, target = normalise_name(source), normalise_name(target)
    if not source or not target:
        return None
    return ExtractedRelation(source, target, _keywords(item.get("keywords")), description,
                             _weight(item.get("weight")))


def parse_extraction(content: str, *, entity_types: Sequence[str]) -> ExtractionResult:
    """The model's reply as an :class:`ExtractionResult`; malformed items are dropped."""
    if not isinstance(content, str):
        raise ExtractionFormatError(f"expected text, got {type(content).__name__}")
    if isinstance(entity_types, str):
        entity_types = (entity_types,)
    data = _decode_object(content)
    collector = _Collector()
    for item in _items(data, "entities"):
        entity = _parse_entity(item, entity_types)
        if entity:
            collector.add_entity(entity)
    for item in _items(data, "relations"):
        relation = _parse_relation(item)
        if relation:
            collector.add_relation(relation)
    return collector.result()
