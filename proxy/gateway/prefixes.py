"""Per-turn control, LightRAG's prefixes on the last user message:

    /local /global /hybrid /naive /mix /bypass  the mode for this turn
    /context, /{mode}context                    answer with the retrieved context itself
    /[instructions] q, /{mode}[instructions] q  extra instructions for the answer
    /{"category": "hr"} q                       only documents whose metadata match (a filter,
                                                proxy/core/metadata.py), after the mode and
                                                context parts, before the instructions:
                                                /local{"year": {"$gte": 2024}}[be brief] q

The prefix is stripped before the message goes upstream. The ``X-GraphGate-Filter`` header gives
a filter too (the prefix's wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proxy.core import json_text
from proxy.core.errors import BadRequest
from proxy.core.metadata import Filter, parse_filter
from proxy.core.modes import MODES

_HEAD = re.compile(r"^/(local|global|hybrid|naive|mix|bypass)?(context)?")
_TAIL = re.compile(r"(?:\[([^\]]*)\])?(?:\s+|$)", re.S)


@dataclass(frozen=True)
class TurnControl:
    mode: str | None
    context_only: bool
    instructions: str | None
    text: str                    # the message without its prefix
    filters: Filter | None = None


def parse_prefix(text: str) -> TurnControl:
    """The turn's prefix; a text that merely starts with "/" is no prefix. A prefix's filter that is
    not a valid filter is a 400 (the user meant one: its braces follow the slash)."""
    head = _HEAD.match(text)
    if head is None:
        return TurnControl(None, False, None, text)
    end, filters = head.end(), None
    if text.startswith("{", end):
        try:
            value, end = json_text.raw_decode(text, end)
        except json_text.JSONTooDeep as exc:   # braces far deeper than any filter: meant as one, and refused
            raise BadRequest(f"the prefix's filter is {exc}") from None
        except ValueError:
            return TurnControl(None, False, None, text)   # not JSON: an ordinary message
        filters = parse_filter(value, where="the prefix's filter")
    tail = _TAIL.match(text, end)
    if tail is None:
        return TurnControl(None, False, None, text)
    mode, context = head.groups()
    instructions = tail.group(1)
    if not (mode or context or instructions is not None or end > head.end()):
        return TurnControl(None, False, None, text)
    return TurnControl(mode, bool(context), (instructions or "").strip() or None, text[tail.end():], filters)


def header_filter(value: str | None) -> Filter | None:
    if value is None or not value.strip():
        return None
    return parse_filter(value, where="X-GraphGate-Filter")


def header_mode(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    mode = value.strip().lower()
    if mode not in MODES:
        raise BadRequest(f"X-GraphGate-Mode must be one of {', '.join(MODES)}, not {value!r}")
    return mode
