"""Where sentences end, in any script: at . ! ? (then closing quotes or brackets) before whitespace,
and at the full stops of Chinese and Japanese (。！？；, also half-width ｡), which need no space after.
Used to cut chunks at sentence boundaries, to start a chunk's overlap at a sentence, and to split a
description into its notes."""

from __future__ import annotations

import re

# group 1: the whitespace after a Latin stop; group 2: whatever whitespace follows a CJK stop
SENTENCE_END = re.compile(r"[.!?]+[\"'’”)\]]*(\s+)|[。！？；｡]+[”’」』）)]*(\s*)")
# a clause ends at a comma, semicolon or colon: before whitespace in spaced scripts, anywhere in CJK
_CLAUSE_END = re.compile(r"[,;:]+(\s+)|[，、；：]+(\s*)")
_NOTE_BREAK = re.compile(r"\n+|(?<=[.!?])\s+|(?<=[。！？；｡])\s*")


def first_sentence_start(text: str) -> int | None:
    """Where the first sentence that begins inside ``text`` begins (after a sentence end with text
    after it), or None when ``text`` holds no sentence end before its last sentence."""
    for m in SENTENCE_END.finditer(text):
        if m.end() < len(text) and text[m.end():].strip():
            return m.end()
    return None


def first_clause_start(text: str) -> int | None:
    """Where the first clause that begins inside ``text`` begins (after a comma, semicolon or colon,
    or a sentence end), or None."""
    for pattern in (SENTENCE_END, _CLAUSE_END):
        for m in pattern.finditer(text):
            if m.end() < len(text) and text[m.end():].strip():
                return m.end()
    return None


def split_notes(text: str) -> list[str]:
    """``text``'s lines and sentences, in order, without empty ones."""
    return [part for part in _NOTE_BREAK.split(text) if part.strip()]
