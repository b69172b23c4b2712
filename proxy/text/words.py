"""Cutting text into words, for every script.

Spaced scripts are cut at what is not a letter or digit. Runs of a script written without spaces
are cut by what each use needs:

- ``name_tokens``: one token a character, so that a name is found as any substring of a question
  (``proxy/store/name_index.py`` matches spans of tokens);
- ``terms`` (the keyword index): character bigrams, which find invented and transliterated names a
  dictionary does not know, the way search engines index Chinese and Japanese;
- ``stems`` (how relation words of a question meet a relation's keywords): for the content words
  of Han runs (jieba's search cut, rjieba: a long word and the words it holds; stopwords left out)
  the first character and the bigrams, which meet fully, and every character as a weak stem
  (``MORPHEME``); other unspaced runs by bigrams. A Chinese character is a morpheme, and a
  compound's first one says what it is about, as an English prefix does: 收购方 (acquirer) meets
  收购 (acquisition), 创办 (founded) meets 创始人 (founder). Its last one is often a class shared by
  unrelated words (制造商 maker and 供应商 supplier, 总部 head office and 零部件 components), yet
  sometimes the point (就职 and 任职, taking up and holding a post): a character shared elsewhere
  is half a match (``proxy.retrieval.select.keyword_match``) and answers no word of a chain
  (``relevance.unanswered``). Measured on the Chinese worlds: every character alike gave 2-hop
  0.87 (bench/multihop_recall.py, 4k), the dictionary words or their bigrams alone 0.53, and on the
  shapes bench every character alike let 3-hop chains turn to the suppliers (0.63 at 4k); the first
  character and bigrams alone cost the multi-hop bench's staff lists (谁在X工作 against 员工).

Every function folds first (``proxy.text.fold``): full-width forms, case, traditional Chinese."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import rjieba

from proxy.text.fold import fold, unaccented
from proxy.text.scripts import HAN, UNSPACED, has_unspaced, is_unspaced
from proxy.text.stopwords import keyword_stopwords, stopwords

MORPHEME = "~"  # marks a Han word's character as a weak stem: "~商" is 商 anywhere in a word
STEM = 5  # prefixes of alphabetic words compared: "headquartered" ~ "headquarters", "develop" ~ "develops"

# a run of an unspaced script, or a spaced word (letters, digits and joining marks)
_PIECES = re.compile(f"([{UNSPACED}\U00020000-\U0003134f]+)|((?:(?![{UNSPACED}])[\\w\\u0300-\\u036f])+)")
_HAN_RUN = re.compile(f"[{HAN}]")
_LETTERS = re.compile(r"[^\W\d_]{4,}")


def _pieces(folded: str) -> list[tuple[str, bool]]:
    """``folded``'s words and unspaced runs in order, each with whether it is an unspaced run."""
    return [(run, True) if run else (word, False) for run, word in _PIECES.findall(folded)]


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]


_NAME_DOTS = str.maketrans(dict.fromkeys("·・•‧･", " "))   # between a transliterated name's parts, written any way


def name_tokens(text: str) -> list[str]:
    """``text``'s tokens as names are compared: folded and unaccented words, and each character of an
    unspaced run on its own; a middle dot of any kind is no token ("贝温尔・涅泰蒂" is "贝温尔·涅泰蒂")."""
    tokens: list[str] = []
    for piece, unspaced in _pieces(unaccented(fold(text)).translate(_NAME_DOTS)):
        if unspaced:
            tokens.extend(piece)
        else:
            tokens.extend(w for w in piece.split("_") if w)
    return tokens


def terms(text: str) -> list[str]:
    """The keyword index's terms: words of two characters or more and bigrams of unspaced runs, less
    the stopwords ("ERR-4711" is "err" and "4711")."""
    stop = keyword_stopwords()
    found: list[str] = []
    for piece, unspaced in _pieces(fold(text)):
        if unspaced:
            found.extend(t for t in _bigrams(piece) if t not in stop)
        else:
            found.extend(w for w in piece.split("_") if len(w) > 1 and w not in stop)
    return found


@functools.lru_cache(maxsize=65536)   # keywords, names and descriptions recur from query to query
def stems(text: str) -> frozenset[str]:
    """The words a question's relation words are compared by: prefixes of alphabetic words of four
    letters or more (shorter ones are mostly function words); the first character and bigrams of
    Han content words, and each of their characters as a weak stem (``MORPHEME``); bigrams of other
    unspaced scripts; no stopwords."""
    stop = stopwords()
    found: set[str] = set()
    for piece, unspaced in _pieces(fold(text)):
        if not unspaced:
            found.update(w[:STEM] for w in _LETTERS.findall(piece) if w not in stop)
        elif _HAN_RUN.match(piece):
            for word in rjieba.cut_for_search(piece):
                if len(word) > 1 and word not in stop:
                    found.add(word[0])
                    found.update(_bigrams(word))
                    found.update(MORPHEME + ch for ch in word)
        else:
            found.update(_bigrams(piece))
    return frozenset(found)


@functools.lru_cache(maxsize=65536)
def _name_parts(name: str) -> tuple[frozenset[str], frozenset[str]]:
    """A name's stems and the characters of its unspaced runs."""
    return stems(name), frozenset(ch for piece, unspaced in _pieces(fold(name)) if unspaced for ch in piece)


def without_names(found: frozenset[str], names: Iterable[str]) -> frozenset[str]:
    """``found`` (stems) less those of ``names``: their own stems, and any unspaced stem made only of
    their characters. A name inside a Chinese question is cut with its neighbours ("伊韦韦糖浆制造商"
    may give "伊韦" and "韦糖浆"), so its pieces there are not the stems it has alone."""
    if not found:   # an edge judged without its description: nothing to cut (hundreds per turn)
        return found
    parts = [_name_parts(name) for name in names]
    named = frozenset().union(*(own for own, _ in parts))
    chars = frozenset().union(*(unspaced for _, unspaced in parts))
    left = found - named
    if not chars:
        return left
    return frozenset(s for s in left if not chars.issuperset(s.removeprefix(MORPHEME)))


def strong(shared: frozenset[str]) -> bool:
    """Whether stems two texts share make them meet fully: a word, a prefix, a leading character or a
    bigram, not only a character somewhere in both (``MORPHEME``)."""
    return any(not s.startswith(MORPHEME) for s in shared)


def content_words(text: str) -> list[str]:
    """``text``'s words that are not stopwords in any language it knows (folded; the dictionary words
    of Han runs): none in "what is it?" or "它在哪里？", so such a question asks about nothing."""
    stop = stopwords()
    found: list[str] = []
    for piece, unspaced in _pieces(fold(text)):
        words = rjieba.cut(piece) if unspaced else piece.split("_")
        found.extend(w for w in words if w.strip() and w not in stop)
    return found


def split_words(text: str) -> list[str]:
    """``text``'s words as written (not folded), for dropping some and joining the rest with spaces:
    what spaces separate, and within it the dictionary words of unspaced runs ("总部在哪里" is
    "总部", "在", "哪里")."""
    found: list[str] = []
    for piece in text.split():
        if has_unspaced(piece):
            found.extend(w for w in rjieba.cut(piece) if w.strip())
        else:
            found.append(piece)
    return found


_SPACE = re.compile(r"\s")


def first_word_start(before: str, text: str) -> int:
    """Where in ``text``, which follows ``before``, the first word that begins inside it begins: 0 when
    ``text`` starts a word; within an unspaced run, at the next dictionary word boundary; otherwise
    after the next whitespace (or 0 when there is none)."""
    if not text or not before or before[-1].isspace() or text[0].isspace():
        return 0
    unspaced_before, unspaced_after = is_unspaced(before[-1]), is_unspaced(text[0])
    if unspaced_before != unspaced_after:
        return 0                        # a change of script is a word boundary
    if unspaced_after:
        context = before[-12:]
        position = 0
        for word in rjieba.cut(context + text[:48]):
            position += len(word)
            if position >= len(context):
                return position - len(context)
        return 0
    m = _SPACE.search(text)
    return m.end() if m and text[m.end():].strip() else 0
