"""Document metadata and the filters over it (seed 004: a document carries its source, category...).

Metadata is a small JSON object: string keys, each value a string, a number or a list of those.

A filter is a JSON object whose conditions must all hold (AND); each names a metadata key:

    {"category": "hr"}                      equal (a list value: contains it)
    {"category": ["hr", "legal"]}           any of them
    {"year": {"$gte": 2020, "$lt": 2024}}   operators: $eq $ne $in $nin $gt $gte $lt $lte $exists
    {"$document": "handbook.pdf"}           the document's name (also with a list or operators)

A document that lacks the key fails every condition on it but ``$ne``, ``$nin`` and
``{"$exists": false}``. Both are checked here, once, for every surface (the /rag API, MCP, the
chat header and prefix, the console): bad input is a 400 that names the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core import json_text
from proxy.core.errors import BadRequest

MAX_KEYS = 32
MAX_KEY_CHARS = 64
MAX_STRING_CHARS = 1000
MAX_LIST_ITEMS = 100
MAX_JSON_BYTES = 8 * 1024
DOCUMENT_KEY = "$document"   # a filter on the document's name rather than its metadata
OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists")

Scalar = str | int | float
Value = Scalar | list[Scalar]


def _scalar(value: Any) -> bool:
    if isinstance(value, bool):   # JSON true/false: not a number here
        return False
    if isinstance(value, str):
        return len(value) <= MAX_STRING_CHARS
    return isinstance(value, int) or isinstance(value, float) and math.isfinite(value)


def check_metadata(value: Any, *, where: str = "metadata") -> dict[str, Value]:
    """``value`` as stored metadata, or a 400 naming what is wrong. None is the empty object."""
    if value is None:
        return {}
    value = readable(value, where)
    if not isinstance(value, Mapping):
        raise BadRequest(f"{where} must be a JSON object of string keys")
    if len(value) > MAX_KEYS:
        raise BadRequest(f"{where} has {len(value)} keys; at most {MAX_KEYS}")
    out: dict[str, Value] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS or key.startswith("$"):
            raise BadRequest(f"{where} keys must be non-empty strings of at most {MAX_KEY_CHARS} characters, "
                             f"not starting with '$' (got {key!r})")
        if isinstance(item, list):
            if len(item) > MAX_LIST_ITEMS or not all(_scalar(v) for v in item):
                raise BadRequest(f"{where}[{key!r}]: a list holds at most {MAX_LIST_ITEMS} strings or numbers")
            out[key] = list(item)
        elif _scalar(item):
            out[key] = item
        else:
            raise BadRequest(f"{where}[{key!r}] must be a string (at most {MAX_STRING_CHARS} characters), "
                             f"a number, or a list of those")
    if len(json.dumps(out, ensure_ascii=False).encode()) > MAX_JSON_BYTES:
        raise BadRequest(f"{where} exceeds {MAX_JSON_BYTES} bytes as JSON")
    return out


def parse_json_object(text: str, where: str) -> Any:
    """A field's JSON text (a form field, a header, a query string, a CLI flag); blank is {}."""
    try:
        return json_text.loads(text, storable=True) if text.strip() else {}
    except json_text.JSONTooDeep as exc:   # far deeper than any metadata or filter can be
        raise BadRequest(f"{where} is {exc}") from None
    except json_text.LoneSurrogate as exc:
        raise BadRequest(f"{where}: {exc}") from None
    except ValueError as exc:
        raise BadRequest(f"{where} is not valid JSON: {exc}") from None


def readable(value: Any, where: str) -> Any:
    """Metadata or a filter as its text or as a value already parsed (a body's field, an MCP
    argument), made safe for every step after: no nesting deeper than a field may have (the checks
    and json.dumps below walk it) and no lone surrogate (it is stored, and kept in traces)."""
    if isinstance(value, str):
        return parse_json_object(value, where)
    if json_text.deeper_than(value, json_text.FIELD_DEPTH):
        raise BadRequest(f"{where} is nested deeper than {json_text.FIELD_DEPTH} levels")
    try:
        json_text.refuse_lone_surrogates(value)
    except json_text.LoneSurrogate as exc:
        raise BadRequest(f"{where}: {exc}") from None
    return value


@dataclass(frozen=True)
class Condition:
    key: str              # a metadata key, or DOCUMENT_KEY
    operator: str         # one of OPERATORS
    operand: Any


@dataclass(frozen=True)
class Filter:
    """A parsed filter: conditions that must all hold. ``text`` is its canonical JSON (a cache key)."""
    conditions: tuple[Condition, ...]
    text: str

    def matches(self, name: str, metadata: Mapping[str, Any]) -> bool:
        return all(_holds(c, name if c.key == DOCUMENT_KEY else metadata.get(c.key), c.key == DOCUMENT_KEY
                          or c.key in metadata) for c in self.conditions)


def parse_filter(value: Any, *, where: str = "filters") -> Filter | None:
    """A request's filter (a JSON object, or its text), None when absent or empty; a 400 naming the
    key when it cannot be read."""
    if value is None:
        return None
    value = readable(value, where)
    if not isinstance(value, Mapping):
        raise BadRequest(f'{where} must be a JSON object such as {{"category": "hr"}}')
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        raise BadRequest(f"{where} must be JSON") from None
    if size > MAX_JSON_BYTES:   # it is matched against every document and kept in the turn's trace
        raise BadRequest(f"{where} exceeds {MAX_JSON_BYTES} bytes as JSON")
    conditions: list[Condition] = []
    for key, spec in value.items():
        if not isinstance(key, str) or not key or key.startswith("$") and key != DOCUMENT_KEY:
            raise BadRequest(f"{where}: {key!r} is not a metadata key (keys starting with '$' are operators; "
                             f"{DOCUMENT_KEY} names the document)")
        conditions.extend(_conditions(key, spec, where))
    if not conditions:
        return None
    return Filter(tuple(conditions), json.dumps(value, sort_keys=True, ensure_ascii=False))


def _conditions(key: str, spec: Any, where: str) -> list[Condition]:
    if isinstance(spec, list):
        if not spec or len(spec) > MAX_LIST_ITEMS or not all(_scalar(v) for v in spec):
            raise BadRequest(f"{where}[{key!r}]: a list takes 1 to {MAX_LIST_ITEMS} strings or numbers")
        return [Condition(key, "$in", frozenset(spec))]
    if not isinstance(spec, Mapping):
        return [Condition(key, "$eq", _operand(key, "$eq", spec, where))]
    if not spec:
        raise BadRequest(f"{where}[{key!r}]: an empty object is no condition")
    out = []
    for operator, operand in spec.items():
        if operator not in OPERATORS:
            raise BadRequest(f"{where}[{key!r}]: unknown operator {operator!r} (one of {', '.join(OPERATORS)})")
        out.append(Condition(key, operator, _operand(key, operator, operand, where)))
    return out


def _operand(key: str, operator: str, operand: Any, where: str) -> Any:
    if operator == "$exists":
        if not isinstance(operand, bool):
            raise BadRequest(f"{where}[{key!r}]: $exists takes true or false")
        return operand
    if operator in ("$in", "$nin"):
        if (not isinstance(operand, list) or not operand or len(operand) > MAX_LIST_ITEMS
                or not all(_scalar(v) for v in operand)):
            raise BadRequest(f"{where}[{key!r}]: {operator} takes a list of 1 to {MAX_LIST_ITEMS} strings or numbers")
        return frozenset(operand)
    if not _scalar(operand):
        raise BadRequest(f"{where}[{key!r}]: {operator} takes a string or a number")
    if operator in ("$gt", "$gte", "$lt", "$lte") and isinstance(operand, str):
        return operand   # strings compare as strings (ISO dates order correctly)
    return operand


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _compare(left: Any, right: Any, operator: str) -> bool:
    if isinstance(left, str) != isinstance(right, str):   # a number and a string never compare
        return False
    if operator == "$gt":
        return bool(left > right)
    if operator == "$gte":
        return bool(left >= right)
    if operator == "$lt":
        return bool(left < right)
    return bool(left <= right)


def _holds(condition: Condition, value: Any, present: bool) -> bool:
    operator, operand = condition.operator, condition.operand
    if operator == "$exists":
        return present == operand
    if operator == "$ne":
        return not present or operand not in _values(value)
    if operator == "$nin":
        return not present or not any(v in operand for v in _values(value))
    if not present:
        return False
    if operator == "$eq":
        return operand in _values(value)
    if operator == "$in":
        return any(v in operand for v in _values(value))
    return any(_compare(v, operand, operator) for v in _values(value))
