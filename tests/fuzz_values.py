"""Values the fuzzers send and look for: strings with a lone UTF-16 surrogate, and JSON bytes
written as a client's JSON encoder writes them."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import strategies as st

# a lone UTF-16 surrogate: valid JSON once escaped ("\\ud800"), not valid Unicode; GraphGate answers 400
lone_surrogates = st.builds(lambda a, code, b: a + chr(code) + b, st.text(max_size=8), st.integers(0xD800, 0xDFFF),
                            st.text(max_size=8))

_SURROGATE = re.compile("[\ud800-\udfff]")


def json_bytes(value: Any) -> bytes:
    """UTF-8 JSON; a surrogate is written as its escape, as a client's JSON encoder does (raw, it
    would be bad UTF-8, which tests/test_fuzz_api.py's ``raw_bodies`` sends as well)."""
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def lone_surrogate_in(raw: bytes | None) -> bool:
    """Whether ``raw`` is a JSON object holding a lone surrogate in a key or string."""
    try:
        stack = [json.loads(raw)] if raw else []
    except (ValueError, RecursionError):
        return False
    if not stack or not isinstance(stack[0], dict):
        return False
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any(_SURROGATE.search(k) for k in value):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and _SURROGATE.search(value):
            return True
    return False
