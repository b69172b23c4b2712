"""Folding: the form two spellings of one text share, so that they compare equal.

Full-width and compatibility forms become their plain form (NFKC: "Ｚｏｒｖｅｌ，" is "zorvel,"),
case is folded, characters that do not print (zero-width spaces and joiners, the byte-order mark,
soft hyphens) go, and traditional Chinese becomes simplified (OpenCC, the maintained converter),
so a question typed in either finds a document written in the other. Accents are a separate step
(``unaccented``): names compare without them, words of running text keep them."""

from __future__ import annotations

import functools
import re
import unicodedata

import opencc

from proxy.text.scripts import HAN

_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u206a-\u206f\ufeff]")
_HAN_CHAR = re.compile(f"[{HAN}]")


@functools.cache
def _to_simplified() -> opencc.OpenCC:
    return opencc.OpenCC("t2s")   # its dictionaries ship in the wheel: nothing is fetched


def fold(text: str) -> str:
    """``text`` in the form spellings of it share: NFKC, case-folded, nothing invisible, simplified Chinese."""
    if text.isascii():
        return text.casefold()
    folded = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text)).casefold()
    if _HAN_CHAR.search(folded):
        folded = _to_simplified().convert(folded)
    return folded


def unaccented(text: str) -> str:
    """``text`` without the accents of alphabetic scripts ("café" is "cafe"); the marks that are part
    of a letter elsewhere (Japanese voicing marks, Indic vowel signs) stay."""
    if text.isascii():
        return text
    kept: list[str] = []
    base = ""
    for char in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(char) and base < "\u0530":   # Latin, Greek, Cyrillic and their marks
            continue
        kept.append(char)
        if not unicodedata.combining(char):
            base = char
    return unicodedata.normalize("NFC", "".join(kept))
