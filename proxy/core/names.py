"""The comparable core of a name: what merge suggestions compare and what entity linking matches.

No accents, punctuation, case, articles or legal suffixes: "ACME Corp." and "the Acme, Inc" are
both "acme". Shared by the merging layer and the store's name index, so it sits in the kernel.
"""

from __future__ import annotations

import re
import unicodedata

DROP_WORDS = frozenset({"the", "a", "an", "inc", "incorporated", "corp", "corporation", "co", "company", "ltd",
                        "limited", "llc", "plc", "gmbh", "ag", "sa"})

_SPLIT = re.compile(r"[\W_]+")


def name_words(text: str) -> list[str]:
    """``text``'s words as names are compared: folded, unaccented, without the ``DROP_WORDS``."""
    folded = text.casefold()
    if not folded.isascii():  # the usual case skips the Unicode decomposition
        folded = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))
    return [w for w in _SPLIT.split(folded) if w and w not in DROP_WORDS]


def normalised(name: str) -> str:
    """The comparable core of a name: no accents, punctuation, articles or legal suffixes."""
    return " ".join(name_words(name))
