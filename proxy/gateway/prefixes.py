"""Per-turn control, LightRAG's prefixes on the last user message:

    /local /global /hybrid /naive /mix /bypass  the mode for this turn
    /context, /{mode}context                    answer with the retrieved context itself
    /[instructions] q, /{mode}[instructions] q  extra instructions for the answer

The prefix is stripped before the message goes upstream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proxy.core.errors import BadRequest
from proxy.core.modes import MODES

_PREFIX = re.compile(r"^/(local|global|hybrid|naive|mix|bypass)?(context)?(?:\[([^\]]*)\])?(?:\s+|$)", re.S)


@dataclass(frozen=True)
class TurnControl:
    mode: str | None
    context_only: bool
    instructions: str | None
    text: str                    # the message without its prefix


def parse_prefix(text: str) -> TurnControl:
    match = _PREFIX.match(text)
    if not match or not any(match.groups()[:2]) and match.group(3) is None:
        return TurnControl(None, False, None, text)
    mode, context, instructions = match.groups()
    return TurnControl(mode, bool(context), (instructions or "").strip() or None, text[match.end():])


def header_mode(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    mode = value.strip().lower()
    if mode not in MODES:
        raise BadRequest(f"X-GraphGate-Mode must be one of {', '.join(MODES)}, not {value!r}")
    return mode
