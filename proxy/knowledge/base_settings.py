"""A knowledge base's own settings (issue 20): the few settings a base may override, checked with
the settings table's own parsers and applied to the settings its service is opened with.

The overridable settings are those that shape what a base's ingestion makes of its documents:

- ``llm_model``: the extraction (and summary) model, e.g. a model that knows the base's language;
- ``entity_types``: what the extraction looks for (an HR handbook's people and policies, a
  codebase's modules and functions);
- ``language``: the language of the extracted descriptions and summaries and of the words around its
  chats' context (``auto``, the default: each document's and question's own);
- ``chunk_tokens`` and ``chunk_overlap``: how documents are cut (applies to documents ingested
  afterwards; ``graphgate reindex`` does not re-cut);
- ``gleaning``: extra extraction passes (a dense base is worth a second pass, a large one is not).

The others are not per base: the upstream, listening, limits and concurrency are the process's
(the bases share the upstream's slots); the embedding model and vector type shape the indexes
(changing them needs ``graphgate reindex``); the retrieval settings are per query already (and a
knowledge model, part 2, carries its own mode and options).

Overrides are stored as JSON values: strings, numbers, and a list of names for ``entity_types``
(a comma-separated string is accepted too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.errors import BadRequest
from proxy.core.settings import SETTINGS_BY_NAME, Settings

OVERRIDABLE: tuple[str, ...] = ("llm_model", "entity_types", "language", "chunk_tokens", "chunk_overlap",
                                "gleaning")


def _raw(name: str, value: Any) -> str:
    """The value as the settings table's parser takes it (the text of an environment variable)."""
    if isinstance(value, bool):   # a bool is an int to Python: never a setting's value here
        raise ValueError("expected a string or a number, got a boolean")
    if name == "entity_types" and isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise ValueError("expected a list of names")
        return ",".join(value)
    if isinstance(value, (str, int)) and not (name == "entity_types" and isinstance(value, int)):
        return str(value)
    raise ValueError(f"expected {'a list of names' if name == 'entity_types' else 'a string or a whole number'}, "
                     f"got {type(value).__name__}")


def _stored(value: Any) -> Any:
    """The parsed value as kept in the registry (a tuple of names as a list)."""
    return list(value) if isinstance(value, tuple) else value


def parse_override(name: str, value: Any) -> Any:
    """The override's value as stored, or BadRequest naming the setting."""
    if name not in OVERRIDABLE:
        raise BadRequest(f"{name!r} is not a setting a knowledge base may override (they are: "
                         f"{', '.join(OVERRIDABLE)})")
    setting = SETTINGS_BY_NAME[name]
    try:
        parsed = setting.parse(_raw(name, value))
    except ValueError as exc:
        raise BadRequest(f"settings.{name}: invalid value {value!r}: {exc}") from None
    if parsed is None:   # an empty llm_model: say so rather than store "the gateway's own"
        raise BadRequest(f"settings.{name}: give a value (null removes the override)")
    return _stored(parsed)


def merge_overrides(current: Mapping[str, Any], changes: Any, base: Settings) -> dict[str, Any]:
    """``current`` with ``changes`` applied (a null removes an override), every value checked, and
    the result checked as a whole against ``base`` (the chunk overlap must stay below the chunk
    size); BadRequest naming the setting, nothing changed, otherwise."""
    if not isinstance(changes, dict):
        raise BadRequest("settings must be an object: {\"setting\": value, ...}")
    merged = dict(current)
    for name, value in changes.items():
        if value is None:
            if name not in OVERRIDABLE and name not in merged:   # (one in a list edited by hand may go)
                parse_override(name, value)   # the same 400 as for a value
            merged.pop(name, None)
        else:
            merged[name] = parse_override(name, value)
    try:
        effective = apply_overrides(base, merged)
    except ValueError as exc:   # a bad override kept from a list edited by hand, and not removed here
        raise BadRequest(f"{exc}: remove it with {{\"settings\": {{<name>: null}}}}") from exc
    if effective.chunk_overlap >= effective.chunk_tokens:
        raise BadRequest(f"settings.chunk_overlap ({effective.chunk_overlap}) must be below settings.chunk_tokens "
                         f"({effective.chunk_tokens})")
    return merged


def apply_overrides(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """``settings`` with the base's overrides (already checked; a registry edited by hand is checked
    again: ValueError naming the setting)."""
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in OVERRIDABLE:
            raise ValueError(f"{name!r} is not a setting a knowledge base may override")
        try:
            changes[name] = SETTINGS_BY_NAME[name].parse(_raw(name, value))
        except ValueError as exc:
            raise ValueError(f"settings.{name}: invalid value {value!r}: {exc}") from None
    return settings.replace(**changes) if changes else settings


def effective_values(settings: Settings) -> dict[str, Any]:
    """The overridable settings' values in ``settings`` (what a base's service is opened with)."""
    return {name: _stored(getattr(settings, name)) for name in OVERRIDABLE}
