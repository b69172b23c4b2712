"""Our extraction prompts and the JSON schema of the structured output (Ollama's `format`)."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.extraction.results import OTHER, ExtractionResult


def extraction_schema() -> dict:
    """The JSON schema given to Ollama as ``format``."""
    entity = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "type": {"type": "string"},
                       "description": {"type": "string"}},
        "required": ["name", "type", "description"],
    }
    relation = {
        "type": "object",
        "properties": {"source": {"type": "string"}, "target": {"type": "string"},
                       "keywords": {"type": "array", "items": {"type": "string"}},
                       "description": {"type": "string"}, "weight": {"type": "number"}},
        "required": ["source", "target", "keywords", "description", "weight"],
    }
    return {
        "type": "object",
        "properties": {"entities": {"type": "array", "items": entity},
                       "relations": {"type": "array", "items": relation}},
        "required": ["entities", "relations"],
    }


_SYSTEM = """You build a knowledge graph from documents. You read one passage and answer with \
a single JSON object, nothing else.

The object has two lists:
- "entities": each item has "name", "type" and "description".
- "relations": each item has "source", "target", "keywords", "description" and "weight".

Rules:
1. Entities are the named or clearly identifiable things the passage talks about. Give each one \
of these types: {types}. When none of them fits, use "Other".
2. Write every name exactly as the passage spells it; do not translate names.
3. A description says, in one to three sentences, what the passage tells about the entity or \
about how the two entities are connected.
4. A relation links two different entities that the passage itself connects. "keywords" are a \
few short words or phrases naming the kind of link; "weight" rates how strong and explicit the \
link is, from 1 (weak, implied) to 10 (central, stated outright).
5. Use only what the passage states. Do not add outside knowledge and do not guess.
6. Write all descriptions and keywords in {language}."""

_USER = """Passage:
<<<
{text}
>>>

Extract the entities and relations of this passage as JSON."""

_GLEAN = """Passage:
<<<
{text}
>>>

A first reading of this passage already found the items below.

Entities already found:
{entities}

Relations already found:
{relations}

Read the passage again and list ONLY entities and relations that are missing from these lists. \
Do not repeat any item above. If nothing was missed, answer with empty lists: \
{{"entities": [], "relations": []}}."""


def _types_text(entity_types: Sequence[str]) -> str:
    if isinstance(entity_types, str):
        entity_types = (entity_types,)
    return ", ".join(entity_types) or OTHER


def _system_message(entity_types: Sequence[str], language: str) -> dict:
    content = _SYSTEM.format(types=_types_text(entity_types), language=language)
    return {"role": "system", "content": content}


def extraction_messages(text: str, *, entity_types: Sequence[str], language: str) -> list[dict]:
    return [_system_message(entity_types, language),
            {"role": "user", "content": _USER.format(text=text)}]


def gleaning_messages(text: str, previous: ExtractionResult, *,
                      entity_types: Sequence[str], language: str) -> list[dict]:
    entities = "\n".join(f"- {e.name} ({e.type})" for e in previous.entities) or "(none)"
    relations = "\n".join(f"- {r.source} <-> {r.target}" for r in previous.relations) or "(none)"
    user = _GLEAN.format(text=text, entities=entities, relations=relations)
    return [_system_message(entity_types, language), {"role": "user", "content": user}]
