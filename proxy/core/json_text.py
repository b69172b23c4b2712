"""JSON text from outside GraphGate, read with bounds: request bodies and the JSON typed into
fields, headers, query strings and chat prefixes, and the upstream's replies.

Python's parser recurses once per level of nesting: ``[[[[...`` a few thousand deep raises
RecursionError, a 500 that also takes the connection down; a value that parses just below the
interpreter's limit fails later, in whatever walks it next (``json.dumps``, a check). So the depth
is measured on the text first, without recursing and before a byte is parsed, and anything deeper
than the caller's bound is refused with ``JSONTooDeep``: a ``ValueError``, like every other reason
the text cannot be read, so a caller that already turns ValueError into its 4xx (or 502) needs
nothing new. A value that passed can be walked, written and compared by any code, recursive or not.

``storable=True`` also refuses a lone UTF-16 surrogate ("\\ud800" with no partner): JSON allows the
escape, but the str it parses into cannot be encoded again, so storing or forwarding it fails later.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Fields, headers, query strings, prefixes, the upstream's model lists: a metadata object or a
# filter needs 3 levels, a model's options 2, /api/tags 5; 64 is room to spare, and shallow enough
# for any recursive code at any call depth.
FIELD_DEPTH = 64
# A whole request body (and a reply to GraphGate's own calls). Ollama's Go decoder allows 10,000, but
# real bodies nest a few dozen levels at most (a tool's or a format's JSON schema: about three levels
# per level of its objects). 200 is far beyond that, far from Python's 1,000-frame recursion limit
# (json.dumps of the body, from a handler's ~30 frames), and below orjson's 254-level limit for
# writing, so a value of it embedded a few levels down in a call of GraphGate's own can be written too.
BODY_DEPTH = 200


class JSONTooDeep(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels")
        self.limit = limit


class NotFinite(ValueError):
    """``NaN``, ``Infinity`` or a number past a double's range: Python's parser takes them, JSON
    (and Ollama's Go decoder) does not, and once parsed they are written back as invalid JSON."""


def _no_constant(name: str) -> float:
    raise NotFinite(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"the number {text[:40]} is out of range")
    return value


def first_not_finite(value: Any) -> tuple[str, str] | None:
    """Where ``value`` first holds NaN or an infinity, and which (``"NaN"``, ``"an infinity"``),
    or None (iteratively): for values parsed by a reader that took them."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where, "NaN" if math.isnan(item) else "an infinity"
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}" if where else str(key), child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None


def _located(exc: NotFinite, text: str | bytes) -> NotFinite:
    """``exc`` naming where the number is (read again, leniently: only on this error's path)."""
    found = first_not_finite(json.loads(text))
    if found is None or not found[0]:
        return exc
    where, what = found
    return NotFinite(f"{where[:100]!r} is {what}, which JSON does not allow")


class LoneSurrogate(ValueError):
    """A string or key holding a UTF-16 surrogate with no partner; ``where`` is its path."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


def loads(text: str | bytes, *, max_depth: int = FIELD_DEPTH, storable: bool = False) -> Any:
    """``json.loads`` (same values, same messages), refusing nesting deeper than ``max_depth``
    (``JSONTooDeep``), numbers that are not finite (``NotFinite``) and, when ``storable``, lone
    surrogates (``LoneSurrogate``)."""
    refuse_too_deep(text, max_depth)
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:   # never reached after the scan; kept so that no caller can see one
        raise JSONTooDeep(max_depth) from None
    except NotFinite as exc:
        raise _located(exc, text) from None
    if storable and maybe_surrogate(text):
        refuse_lone_surrogates(value)
    return value


def raw_decode(text: str, start: int = 0, *, max_depth: int = FIELD_DEPTH) -> tuple[Any, int]:
    """The JSON value at ``text[start:]`` and where it ends (``JSONDecoder.raw_decode``; the text
    after it is not JSON), bounded like ``loads``."""
    refuse_too_deep(text[start:], max_depth, first_value_only=True)
    try:
        return _DECODER.raw_decode(text, start)
    except RecursionError:
        raise JSONTooDeep(max_depth) from None


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)

# A JSON string: possessive, so that a quote with no partner costs one pass, not one per quote
# after it; its closing quote may be missing (invalid JSON, which the parser then refuses).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


def refuse_too_deep(text: str | bytes, max_depth: int, *, first_value_only: bool = False) -> None:
    """``JSONTooDeep`` when ``text`` nests arrays and objects deeper than ``max_depth``. Exact for
    valid JSON; for invalid JSON, never less deep than what the parser reaches before its error.
    Linear; Python touches only the brackets, and only when there are more than ``max_depth``."""
    raw = _as_utf8(text)
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return
    if first_value_only and raw.lstrip()[:1] not in (b"[", b"{"):
        return   # a string or a number: no depth, whatever brackets the text after it holds
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if byte in _OPENING:
            depth += 1
            if depth > max_depth:
                raise JSONTooDeep(max_depth)
        else:
            depth -= 1
            if depth <= 0 and first_value_only:
                return


def _as_utf8(text: str | bytes) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(text)   # as json.loads reads bytes: UTF-16 and UTF-32 too
    if encoding in ("utf-8", "utf-8-sig"):
        return text
    try:
        return text.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError:
        return text   # the parser will refuse it; the bytes as they are bound nothing worse


def deeper_than(value: Any, max_depth: int) -> bool:
    """Whether a parsed value nests lists and dicts deeper than ``max_depth`` (iteratively): for
    values that did not come through ``loads`` (a body's field, a value from a library)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")
# an escape ("\\ud800"; paired ones, an emoji, match too: the walk tells them apart), or one encoded
# raw (ED A0 80: not UTF-8, but Python's json decodes bytes with "surrogatepass"), or one in a str
_MAYBE_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_MAYBE_SURROGATE_TEXT = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def maybe_surrogate(text: str | bytes) -> bool:
    """A cheap look at the text: whether its value may hold a surrogate (then walk it)."""
    if isinstance(text, bytes):
        return (_MAYBE_SURROGATE_BYTES.search(text) is not None
                or json.detect_encoding(text) not in ("utf-8", "utf-8-sig"))   # UTF-16, UTF-32: walk
    return _MAYBE_SURROGATE_TEXT.search(text) is not None


def refuse_lone_surrogates(value: Any) -> None:
    """``LoneSurrogate`` naming the first key or string of ``value`` that holds one (iteratively).
    Every later step (the store, the tokenizer, the upstream's body) would fail to encode it."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise LoneSurrogate(f"a key{_at(where)} holds {_named(key)}", where)
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
        elif isinstance(item, str) and _SURROGATE.search(item):
            raise LoneSurrogate(f"the string{_at(where)} holds {_named(item)}", where)


def _at(where: str) -> str:
    return f" at {where[:100]!r}" if where else ""


def _named(text: str) -> str:
    found = _SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "a surrogate"
    return f"a lone UTF-16 surrogate ({code}), which is not valid Unicode"
