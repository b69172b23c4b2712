"""Regular-expression lookups in pages and bodies that a test needs to find."""

from __future__ import annotations

import re


def must_find(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    """``re.search`` that fails the test, naming the pattern, when nothing matches."""
    match = re.search(pattern, text, flags)
    if match is None:
        raise AssertionError(f"no match for {pattern!r}")
    return match
