"""The comparable core of a name: what merge suggestions compare and what entity linking matches.

No accents, punctuation, case, width, articles or legal suffixes: "ACME Corp." and "the Ａｃｍｅ, Inc"
are both "acme"; a name in a script written without spaces is one token a character ("奥巴尼克斯"
is "奥 巴 尼 克 斯"), so that it is found inside an unspaced question. Traditional Chinese compares
as simplified. Shared by the merging layer and the store's name index, so it sits in the kernel.
"""

from __future__ import annotations

import re

from proxy.text.fold import fold
from proxy.text.words import name_tokens

DROP_WORDS = frozenset({"the", "a", "an", "inc", "incorporated", "corp", "corporation", "co", "company", "ltd",
                        "limited", "llc", "plc", "gmbh", "ag", "sa"})
# the same for scripts written without spaces, where a legal form is part of the name's run: at its
# start or end only ("株式会社ソニー", "华为技术有限公司"), longest first
_UNSPACED_FORMS = ("股份有限公司", "有限责任公司", "有限公司", "株式会社", "有限会社", "合同会社", "公司")
_UNSPACED_FORM = re.compile(f"^(?:{'|'.join(_UNSPACED_FORMS)})(?=.)|(?<=.)(?:{'|'.join(_UNSPACED_FORMS)})$")


def name_words(text: str) -> list[str]:
    """``text``'s words as names are compared (``proxy.text.words.name_tokens``), without the ``DROP_WORDS``."""
    return [w for w in name_tokens(text) if w not in DROP_WORDS]


def strip_unspaced_forms(name: str) -> str:
    """``name`` folded, less a legal form of an unspaced script at its start or end."""
    folded = fold(name).strip()
    return folded if folded.isascii() else _UNSPACED_FORM.sub("", folded)


def name_core_words(name: str) -> list[str]:
    """A name's words as ``name_words``, less a legal form of an unspaced script at its start or end."""
    return name_words(strip_unspaced_forms(name))


def normalised(name: str) -> str:
    """The comparable core of a name: no accents, punctuation, articles or legal suffixes."""
    return " ".join(name_core_words(name))
