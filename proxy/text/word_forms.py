"""The forms a question's words may take in a relation's keywords and description, beyond their
stems (``proxy.text.words.stems``): the dictionary form of an inflected word (simplemma's
lemmatizer: "took" is "take", "bought" is "buy", "led" is "lead") and the compound two adjacent
words make ("took over" is "takeover", "set up" is "setup", "head office" is "headoffice"). A
5-letter prefix meets regular inflections ("acquired" ~ "acquisition") but not an irregular verb
nor a phrasal verb written as one word: "the company that took over the maker" never met the
keyword "takeover". Only the question's side is widened: a relation's words keep their stems, so
nothing is lemmatized per relation per turn.

Spaced words are lemmatized as English (the language the dictionary holds); a word it does not
know is left as it is. Unspaced scripts (Chinese) keep their stems: a Chinese word does not inflect.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

import simplemma

from proxy.text.fold import fold
from proxy.text.scripts import UNSPACED, has_unspaced
from proxy.text.stopwords import stopwords
from proxy.text.words import STEM, split_words, stems

LEMMA_LANGUAGE = "en"


@functools.lru_cache(maxsize=65536)
def lemma(word: str) -> str:
    """The dictionary form of a folded spaced word (itself when the dictionary does not know it)."""
    return simplemma.lemmatize(word, lang=LEMMA_LANGUAGE).casefold() if word.isalpha() else word


def _plain(token: str) -> str:
    """A whitespace token as one folded word, its punctuation dropped ("over," -> "over")."""
    return "".join(ch for ch in fold(token) if ch.isalnum())


@functools.lru_cache(maxsize=4096)   # a turn asks the same text and its residuals many times
def word_senses(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """Each of ``text``'s words as written (``split_words``) with every stem it may meet a relation's
    words by: its own stems, its lemma's, and those of the compound it makes with the word before
    or after it (neither a stopword: "the company" is no compound; the first shorter than a stem,
    else the compound's stem would be the first word's own: "board chair" is "board")."""
    words = split_words(text)
    stop = stopwords()
    plain = [_plain(w) if not has_unspaced(w) else "" for w in words]
    lemmas = [lemma(p) if p.isalpha() and p not in stop else "" for p in plain]
    senses = []
    for i, word in enumerate(words):
        found = set(stems(word))
        if lemmas[i] and len(lemmas[i]) >= 4:
            found.add(lemmas[i][:STEM])
        for a, b in ((i - 1, i), (i, i + 1)):
            if 0 <= a and b < len(words) and lemmas[b] and 0 < len(lemmas[a]) < STEM:
                found.add((lemmas[a] + lemmas[b])[:STEM])
        senses.append((word, frozenset(found)))
    return tuple(senses)


@functools.lru_cache(maxsize=4096)
def asked_stems(text: str) -> frozenset[str]:
    """Every stem ``text``'s words may meet a relation's words by: ``text``'s stems (an unspaced run cut
    as a whole, as before) and the lemmas and compounds of its spaced words (``word_senses``)."""
    spaced = (found for word, found in word_senses(text) if not has_unspaced(word))
    return stems(text).union(*spaced)


def relation_words(text: str, names: Sequence[str]) -> frozenset[str]:
    """``asked_stems`` of ``text`` with each of ``names`` it writes cut out where it is written: what
    the question asks of those entities. The names' words are not dropped everywhere: in "which
    companies work with 卡卡兹合作社 (a cooperative)?", 合作 (to work with) is still asked."""
    folded = _folded(text)
    return _cut_stems(folded, tuple(dict.fromkeys(f for name in names if (f := _folded(name)) and f in folded)))


_SPLIT_RUN = re.compile(f"(?<=[{UNSPACED}])\\s+(?=[{UNSPACED}])")   # spaces a cut put inside an unspaced run
NAMES_CUT = 64   # a question pasting thousands of names asks no relation words: the rest are not cut


@functools.lru_cache(maxsize=1024)
def cut_names(text: str, names: tuple[str, ...]) -> str:
    """``text`` folded, with the first ``NAMES_CUT`` of ``names`` cut out where it writes them (the
    entities a question names: their names are no relation words on any hop of a chain)."""
    folded = _SPLIT_RUN.sub("", _folded(text))   # a chain's remaining words are joined by spaces
    return _cut(folded, {f for name in names[:NAMES_CUT] if (f := _folded(name)) and f in folded})


_folded = functools.lru_cache(maxsize=65536)(fold)   # per edge per turn: names recur, and folding Han text converts it


@functools.lru_cache(maxsize=4096)   # a hub's hundreds of edges share the question and the hub's name
def _cut_stems(folded: str, present: tuple[str, ...]) -> frozenset[str]:
    return asked_stems(_cut(folded, present))


def _cut(folded: str, present: Iterable[str]) -> str:
    """``folded`` with each of the folded names ``present`` in it replaced by a space."""
    for name in sorted(present, key=len, reverse=True):   # the longer first: a name may hold another
        folded = folded.replace(name, " ")
    return folded
