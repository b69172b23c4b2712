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
# start or end only ("株式会社ソニー", "华为技术有限公司", "腾讯控股", "XX集团有限公司"), longest first;
# a model writes a Chinese firm's name with or without its group / holding / cooperative form
_UNSPACED_FORMS = ("股份有限公司", "有限责任公司", "有限公司", "株式会社", "有限会社", "合同会社", "公司",
                   "集团", "控股", "合作社")
_UNSPACED_FORM = re.compile(f"^(?:{'|'.join(_UNSPACED_FORMS)})(?=.)|(?<=.)(?:{'|'.join(_UNSPACED_FORMS)})$")
# what may stand between a name's core and a short form in brackets after it: the legal form the
# core left out ("华为技术有限公司（华为）", "Kravon Dynamics Inc. (KVD)")
LEGAL_TAIL = re.compile(r"(?:(?:[\s,]*(?:" + "|".join(sorted(DROP_WORDS - {"the", "a", "an"}, key=len, reverse=True))
                        + r")\.?(?![^\W_]))|" + "|".join(_UNSPACED_FORMS) + r"|[(（]集团[)）])*", re.IGNORECASE)


def name_words(text: str) -> list[str]:
    """``text``'s words as names are compared (``proxy.text.words.name_tokens``), without the ``DROP_WORDS``."""
    return [w for w in name_tokens(text) if w not in DROP_WORDS]


def strip_unspaced_forms(name: str) -> str:
    """``name`` folded, less the legal forms of an unspaced script at its start or end ("集团有限公司"
    is two), and its brackets' ("珍贝柯兄弟（集团）")."""
    folded = fold(name).strip()
    if folded.isascii():
        return folded
    for _ in range(2):
        bare = _UNSPACED_FORM.sub("", re.sub(r"[(（]([^()（）]+)[)）]$", r"\1", folded))
        if bare == folded:
            break
        folded = bare
    return folded


def name_core_words(name: str) -> list[str]:
    """A name's words as ``name_words``, less a legal form of an unspaced script at its start or end."""
    return name_words(strip_unspaced_forms(name))


def normalised(name: str) -> str:
    """The comparable core of a name: no accents, punctuation, articles or legal suffixes."""
    return " ".join(name_core_words(name))
