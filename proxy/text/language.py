"""The language a text is written in, as far as its script tells: what decides the wording around
an injected context and the language extraction writes in, when no setting names one.

Words are counted by script, the names the text holds left out when they are known (the entities
a question links to): a Chinese question naming "Zorvel Systems" is Chinese, an English one naming
"奥巴尼克斯" is English. Han with kana is Japanese, Hangul Korean; a Latin-script text is taken as
English (telling French from English needs more than a script, and English is the default
wording). The names returned are those the settings and prompts use ("English", "Chinese")."""

from __future__ import annotations

import re
from collections.abc import Iterable

from proxy.text.scripts import HAN, HANGUL, KANA

_SCRIPTS = {
    "Chinese": re.compile(f"[{HAN}]"),
    "Japanese": re.compile(f"[{KANA}]"),
    "Korean": re.compile(f"[{HANGUL}]"),
    "Thai": re.compile("[\u0e00-\u0e7f]"),
    "Russian": re.compile("[\u0400-\u04ff]"),
    "Arabic": re.compile("[\u0600-\u06ff]"),
}
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")
_SPACED = ("Korean", "Russian", "Arabic")   # counted in words, like Latin
_RUNS = {language: re.compile(f"(?:{pattern.pattern})+") for language, pattern in _SCRIPTS.items()}
CHARACTERS_PER_WORD = 1.6   # a Chinese or Japanese word is one to two characters
SAMPLE = 2000   # characters looked at: a document's language shows in its start


def detect(text: str, names: Iterable[str] = (), default: str = "English") -> str:
    """The language most of ``text``'s words are written in, ``names`` (found in it) left out;
    ``default`` when it has no words."""
    sample = text[:SAMPLE]
    known = sorted({name for name in names if name}, key=len, reverse=True)   # the longest first
    if known:   # one pass, however many names
        sample = re.sub("|".join(map(re.escape, known)), " ", sample, flags=re.IGNORECASE)
    words: dict[str, float] = {"English": len(_LATIN_WORD.findall(sample))}
    for language, pattern in _SCRIPTS.items():   # characters, or words where words are spaced
        words[language] = len((_RUNS[language] if language in _SPACED else pattern).findall(sample))
    if words["Japanese"]:
        words["Japanese"] += words.pop("Chinese")   # kanji are Han: with kana, they are Japanese
    for language in ("Chinese", "Japanese", "Thai"):
        if language in words:
            words[language] /= CHARACTERS_PER_WORD
    language, count = max(words.items(), key=lambda item: item[1])
    return language if count else default
