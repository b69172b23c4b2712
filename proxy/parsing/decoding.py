"""Decoding uploaded text: BOMs, UTF-8, then detection (charset-normalizer), refusing binary data."""

from __future__ import annotations

import codecs
import re
import unicodedata

import charset_normalizer

from proxy.core.errors import BadRequest

MAX_CONTROL_SHARE = 0.05      # decoded text with more control characters than this is binary
MAX_ACCENTED_SHARE = 0.5      # of the letters, for bytes to pass as cp1252 against a detector's guess

_BOMS = (  # UTF-32 LE before UTF-16 LE: the first starts with the second
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
# Without a byte-order mark these are guesses we never want: UTF-16/32 text without NUL bytes is
# vanishingly rare, and EBCDIC is not what anyone uploads; both "decode" short Latin text as junk.
_NEVER_GUESS = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7",
                "cp037", "cp273", "cp424", "cp500", "cp875", "cp1026", "cp1140"]
_BAD_CHARS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_WESTERN_PUNCTUATION = frozenset("\u00a0«»‘’‚“”„–—…•€°§©®™·¡¿")


_ANSI_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")   # colour codes in saved terminal logs


def parse_text(name: str, data: bytes) -> str:
    return _ANSI_ESCAPES.sub("", decode(name, data))


def decode(name: str, data: bytes, declared: str | None = None) -> str:
    """Byte-order mark, else UTF-8, else the ``declared`` charset, else detection; refuses binary."""
    text = _decode_bom(data)
    if text is None:
        if b"\x00" in data:
            raise _not_text(name, "it contains NUL bytes, so it looks like a binary file")
        text = _trydecode(data, "utf-8")
        if text is None and declared:
            text = _trydecode(data, declared)
        if text is None:
            text = _detect(name, data)
    bad = len(_BAD_CHARS.findall(text))
    if bad > MAX_CONTROL_SHARE * len(text):
        raise _not_text(name, f"{bad} of its {len(text)} characters are control characters")
    return text


def _decode_bom(data: bytes) -> str | None:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")   # bad bytes count as control characters
    return None


def _trydecode(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _detect(name: str, data: bytes) -> str:
    matches = charset_normalizer.from_bytes(data, cp_exclusion=_NEVER_GUESS)
    best = matches.best()
    if best is None:
        raise _not_text(name, "its character encoding could not be detected")
    text = str(best)
    # charset-normalizer cannot tell Western from Central European/Baltic code pages apart (French
    # cp1252 comes back as cp1257, "très" as "trčs"), and short text gets any code page at all.
    # When cp1252 is in play and reads the bytes as mostly-ASCII words with a few accented letters
    # and common punctuation, it is by far the likelier encoding.
    if best.encoding != "cp1252" and (_is_latin_script(text) or _cp1252_candidate(matches)):
        western = _trydecode(data, "cp1252")
        if western is not None and _looks_western(western):
            return western
    return text


def _is_latin_script(text: str) -> bool:
    return all(unicodedata.name(ch, "").startswith("LATIN")
               for ch in set(_NON_ASCII.findall(text)) if ch.isalpha())


def _cp1252_candidate(matches: charset_normalizer.CharsetMatches) -> bool:
    return any("cp1252" in match.could_be_from_charset for match in matches)


def _looks_western(text: str) -> bool:
    """Letters and common punctuation only, and accented letters a minority (Cyrillic, Greek,
    Hebrew... read as cp1252 come out as runs of accented Latin letters)."""
    non_ascii = _NON_ASCII.findall(text)
    if not all(ch.isalpha() or ch in _WESTERN_PUNCTUATION for ch in set(non_ascii)):
        return False
    accented = sum(ch.isalpha() for ch in non_ascii)
    return accented <= MAX_ACCENTED_SHARE * sum(ch.isalpha() for ch in text)


def _not_text(name: str, why: str) -> BadRequest:
    return BadRequest(f"file '{name}' is not readable text ({why})")
