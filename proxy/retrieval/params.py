"""Per-query retrieval parameters: one field per knob of the settings table (the SETTINGS rows
whose parser is a ``Knob``), defaulting to the setting, overridable per request (/rag/query, the
console's playground); plus what only a request gives (keywords, instructions)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from proxy.core.errors import BadRequest
from proxy.core.metadata import Filter, parse_filter
from proxy.core.settings import SETTINGS, Knob, Setting
from proxy.core.settings_sections import RetrievalSettings

KNOBS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.knob is not None)


def knob_of(setting: Setting) -> Knob:
    assert setting.knob is not None
    return setting.knob


# checked in this order: the numbers, then the choices (a request's first bad value is the one named)
NUMBER_KNOBS: tuple[Setting, ...] = tuple(s for s in KNOBS if not knob_of(s).choices)
CHOICE_KNOBS: tuple[Setting, ...] = tuple(s for s in KNOBS if knob_of(s).choices)


@dataclass(frozen=True, kw_only=True)
class QueryRequest:
    """What a request may add to the knobs; the base of the generated ``QueryParams``."""
    hl_keywords: tuple[str, ...] | None = None   # given keywords skip the extraction call
    ll_keywords: tuple[str, ...] | None = None
    instructions: str | None = None               # from the /[...] prefix
    filters: Filter | None = None                 # only the matching documents' chunks, entities, relations
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_settings(cls, settings: RetrievalSettings, **changes: Any) -> QueryParams:
        return QueryParams(**{**{s.name: getattr(settings, s.name) for s in KNOBS}, **changes})

    def with_overrides(self, body: dict[str, Any]) -> Self:
        """Apply a request's knobs, refusing bad values with a 400 that names the field."""
        changes: dict[str, Any] = {}
        for setting in NUMBER_KNOBS:
            if body.get(setting.name) is not None:
                changes[setting.name] = _number(setting.name, body[setting.name], knob_of(setting))
        for setting in CHOICE_KNOBS:
            options = knob_of(setting).choices
            if body.get(setting.name) is not None:
                if body[setting.name] not in options:
                    raise BadRequest(f"{setting.name} must be one of {', '.join(options)}")
                changes[setting.name] = body[setting.name]
        for name in ("hl_keywords", "ll_keywords"):
            if body.get(name) is not None:
                value = body[name]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise BadRequest(f"{name} must be a list of strings")
                changes[name] = tuple(v.strip() for v in value if v.strip())
        if body.get("filters") is not None:
            changes["filters"] = parse_filter(body["filters"])
        return dataclasses.replace(self, **changes)


class KnobValues:
    """The knobs as the type checker sees them: QueryParams is generated from the settings table at
    run time, which mypy cannot follow. Checked against the table at import (``_check_knob_values``)."""
    mode: str
    top_k: int
    chunk_top_k: int
    max_entity_tokens: int
    max_relation_tokens: int
    max_total_tokens: int
    cosine_threshold: float
    related_chunks: int
    chunk_selection: str
    keywords: str
    fusion: str
    linking: str
    expansion: str
    effort: str
    relation_ranking: str
    keyword_search: str
    context_layout: str
    communities: str
    keyword_budget: float


def _check_knob_values() -> None:
    declared = dict(KnobValues.__annotations__)  # strings: annotations are postponed in this module
    table = {s.name: knob_of(s).kind.__name__ for s in KNOBS}
    if declared != table:
        raise RuntimeError(f"KnobValues must declare exactly the settings table's knobs: {table}, not {declared}")


_check_knob_values()

if TYPE_CHECKING:
    @dataclass(frozen=True, kw_only=True)
    class QueryParams(QueryRequest, KnobValues):
        """A retrieval's parameters: one field per knob (``KNOBS``), plus ``QueryRequest``'s."""
else:
    QueryParams = dataclasses.make_dataclass(
        "QueryParams", [(s.name, knob_of(s).kind, field(default=s.parse(s.default), kw_only=True)) for s in KNOBS],
        bases=(QueryRequest, KnobValues), frozen=True)
    QueryParams.__module__ = __name__
    QueryParams.__doc__ = "A retrieval's parameters: one field per knob (``KNOBS``), plus ``QueryRequest``'s."


def _number(name: str, value: Any, knob: Knob) -> Any:
    kind, low, high = knob.kind, knob.low, knob.high
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (kind is int and not float(value).is_integer())):
        raise BadRequest(f"{name} must be {'a whole number' if kind is int else 'a number'}")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low:g} and {high:g}")
    return kind(value)
