"""The ``language`` setting (``GRAPHGATE_LANGUAGE``, or a knowledge base's override): ``auto``, its
default, lets each text speak its own language (a chunk is extracted, a description summarised,
a question's context worded in the language it is written in), or a language's name that every
one of them then uses ("English", "Chinese": it goes into the prompts as written)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from proxy.text.language import detect

AUTO = "auto"
LONGEST = 64   # characters: "Brazilian Portuguese" is 20; a paragraph is not a language's name


def parse_language(raw: str) -> str:
    """``auto`` (any case) or a language's name, stripped; ValueError for an empty value, one with
    control or invisible characters (it goes into prompts), or one too long to be a name."""
    value = raw.strip()
    if not value:
        raise ValueError(f"expected a language's name (English, Chinese, ...) or {AUTO!r} (each text's own)")
    if value.casefold() == AUTO:
        return AUTO
    if len(value) > LONGEST:
        raise ValueError(f"a language's name has at most {LONGEST} characters")
    if any(unicodedata.category(c).startswith("C") for c in value):
        raise ValueError("a language's name holds no control or invisible characters")
    return value


def language_for(setting: str, text: str, names: Iterable[str] = ()) -> str:
    """The language to write or word ``text``'s output in: the setting's, unless it is ``auto``;
    then the one ``text`` is written in (``names`` it holds left out: a Chinese question naming
    "Zorvel Systems" is Chinese)."""
    return setting if setting != AUTO else detect(text, names=names)
