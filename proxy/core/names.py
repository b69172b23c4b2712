"""The comparable core of a name: what merge suggestions compare and what entity linking matches.

No accents, punctuation, case, width, articles or legal suffixes: "ACME Corp." and "the Ａｃｍｅ, Inc"
are both "acme"; a name in a script written without spaces is one token a character ("奥巴尼克斯"
is "奥 巴 尼 克 斯"), so that it is found inside an unspaced question. Traditional Chinese compares
as simplified. Shared by the merging layer and the store's name index, so it sits in the kernel.
"""

from __future__ import annotations

from proxy.text.words import name_tokens

DROP_WORDS = frozenset({"the", "a", "an", "inc", "incorporated", "corp", "corporation", "co", "company", "ltd",
                        "limited", "llc", "plc", "gmbh", "ag", "sa"})


def name_words(text: str) -> list[str]:
    """``text``'s words as names are compared (``proxy.text.words.name_tokens``), without the ``DROP_WORDS``."""
    return [w for w in name_tokens(text) if w not in DROP_WORDS]


def normalised(name: str) -> str:
    """The comparable core of a name: no accents, punctuation, articles or legal suffixes."""
    return " ".join(name_words(name))
