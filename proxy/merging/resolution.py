"""Entity resolution at ingestion: the names a text gives one thing become one entity.

Two kinds of evidence, each kept with the alias it makes (the console shows it and can undo it):

- **the same name**: names whose cores agree (``proxy.core.names``: case, spacing, punctuation,
  articles and legal forms left out, so "The Kravon Ltd", "KRAVON" and "Kravon" are one) are one
  entity: a new name folds into the entity already stored under its core, or into the batch's
  most mentioned spelling;
- **an abbreviation the text introduces**: a name followed by a short form in brackets ("Kravon
  Dynamics (KVD)", "北京大学（简称北大）"), or preceded by one set off by a comma, colon or dash
  and at most three words ("KVD, short for Kravon Dynamics"). The structure is the evidence, not
  the connecting words, so it holds in any wording; a short form must also look like one
  (``abbreviates``), so that "Kravon (Berlin)" or "Lintel, a partner of Kravon" link nothing.

Everything here is pure: what to link is decided from the batch's names and texts and the cores
already stored (``Known``); ``proxy/merging/recompute.py`` applies it.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.core.names import DROP_WORDS, LEGAL_TAIL, name_core_words, normalised, strip_unspaced_forms
from proxy.extraction.results import OTHER, ExtractionResult, name_key
from proxy.merging.rules import UNKNOWN_TYPE
from proxy.store.changes import pair_key
from proxy.text.fold import fold, unaccented
from proxy.text.scripts import has_unspaced
from proxy.text.words import name_tokens

SAME_NAME, ABBREVIATION = "same name", "abbreviation"
SHORT_MAX = 12            # characters of a short form
OCCURRENCES = 8           # occurrences of a name looked at in one chunk
EVIDENCE_MAX = 300        # characters of the sentence kept as evidence
_BRACKET = re.compile(r"[(（\[]([^()（）\[\]\n]{1,40})[)）\]]")   # what brackets hold: a short form, or more
_BRACKETED = re.compile(r"\s*" + _BRACKET.pattern)                   # right after a name
# before a name: a short form, a comma, colon or dash, then one to three spaced words or one to four
# characters of an unspaced script (with none between, "Niger, Nigeria" or "在北京，北京大学" is a
# list or a place, not an introduction); looked for by hand, backwards from the name (a regex
# anchored at the name's start scanned the whole window for every name in every chunk)
SET_OFF_WINDOW = 80
_SEPARATORS = ",，:：—–"
_SHORT_BEFORE = re.compile(r"[^\s,，:：;；—–()（）\[\]]+$")
_PIECE = re.compile(r"[^\s,，:：;；、/\"“”「」『』‘’']+")   # quotes too: （以下简称“梅实”）
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")


@dataclass(frozen=True)
class Link:
    alias: str       # the name key that resolves to ``target`` from now on
    target: str      # an entity key
    reason: str      # SAME_NAME | ABBREVIATION
    evidence: str    # what said so: the two spellings, or the sentence introducing the short form


@functools.lru_cache(maxsize=65536)
def abbreviates(short: str, full: str, *, bracketed: bool = False) -> bool:
    """Whether ``short`` can be a short form of the name ``full``: shorter, beginning with the same
    letter or character and made of the name's letters in order ("KVD" of "Kravon Dynamics", "北大"
    of "北京大学"), but not the name's leading word(s) ("Washington" of "Washington Post" names a
    place too). In brackets right after a name in a script without spaces, a name in Latin letters
    is one too ("克拉冯兄弟（KVB）"). The cheap tests first: most candidates fail the first letter."""
    short = short.strip()
    if bracketed and has_unspaced(full) and short.isascii() and short.isalnum() and not short.isdigit():
        return 2 <= len(short) <= SHORT_MAX and normalised(short) != normalised(full)
    compact = "".join(unaccented(fold(short)).split())
    letters = "".join(ch for ch in unaccented(fold(full)) if ch.isalnum())
    if not 2 <= len(compact) <= SHORT_MAX or len(compact) >= len(letters) or compact[0] != letters[0]:
        return False
    rest = iter(letters)
    if not all(ch in rest for ch in compact):   # a subsequence: each character found after the last
        return False
    if not normalised(short) or normalised(short) == normalised(full):
        return False
    leading = letters.startswith(compact) and (has_unspaced(compact) or " ".join(name_core_words(full)).startswith(
        " ".join(name_core_words(short)) + " "))
    return not leading   # the leading word(s) of the name name more than it


CUE_MAX = 2   # characters of an unspaced script that may come before a short form in brackets (简称, 即)


def _candidates(piece: str) -> list[str]:
    """Short forms a piece of text may hold, longest first: the piece, and for an unspaced run the
    piece less a short lead-in ("简称北大" holds "北大"; "位于北京" is no short form)."""
    piece = piece.strip()
    if not has_unspaced(piece):
        return [piece]
    return [piece[i:] for i in range(min(CUE_MAX, len(piece) - 2) + 1)]


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` around ``start:end``, at most EVIDENCE_MAX characters."""
    left = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    found = _SENTENCE_END.search(text, end)
    right = found.start() if found else len(text)
    return " ".join(text[left:right].split())[:EVIDENCE_MAX]


def _set_off(text: str, start: int) -> str | None:
    """The short form set off before ``text[start:]`` (see ``SET_OFF_WINDOW``), if any."""
    window = text[max(0, start - SET_OFF_WINDOW):start]
    cut = max(window.rfind(mark) for mark in _SEPARATORS)
    if cut < 0:
        return None
    between = window[cut + 1:]
    if any(mark in between for mark in ";；"):
        return None
    words = between.split()
    spaced = 1 <= len(words) <= 3 and between[-1:].isspace()
    unspaced = len(words) == 1 and not between[-1:].isspace() and len(between.strip()) <= 4
    if not (spaced or unspaced):
        return None
    return _token_before(window, cut)


def _token_before(text: str, end: int) -> str | None:
    """The word (or unspaced run) that ends just before ``text[end]``, spaces aside; a short form is
    short, so only the last few dozen characters are read."""
    found = _SHORT_BEFORE.search(text[max(0, end - 4 * SHORT_MAX):end].rstrip())
    return found.group(0) if found else None


def _bracket_shorts(inner: str) -> list[str]:
    """The short forms what a pair of brackets holds may be: its last piece, less a lead-in."""
    pieces = _PIECE.findall(inner)
    return _candidates(pieces[-1]) if pieces else []


_MARK = re.compile(f"[{_SEPARATORS}]")


def _abbreviated(text: str, names: list[str]) -> set[str]:
    """The names of ``names`` some short form in ``text`` may stand for: the bracketed ones' and
    those before a comma, colon or dash, compared by their first letter first. Most chunks have
    none, and then no name is looked for at all."""
    by_initial: dict[str, list[str]] = {}
    for name in names:
        letters = [ch for ch in unaccented(fold(name)) if ch.isalnum()]
        if letters:
            by_initial.setdefault(letters[0], []).append(name)
    possible: set[str] = set()
    shorts = [(short, True) for inner in _BRACKET.findall(text) for short in _bracket_shorts(inner)]
    for mark in _MARK.finditer(text):   # the token before each comma, colon or dash
        token = _token_before(text, mark.start())
        shorts += [(short, False) for short in _candidates(token)] if token else []
    unspaced = [name for name in names if has_unspaced(name)]
    for short, bracketed in shorts:
        head = unaccented(fold(short[:1]))
        for name in by_initial.get(head, []) + (unspaced if bracketed and short.isascii() else []):
            if name not in possible and abbreviates(short, name, bracketed=bracketed):
                possible.add(name)
    return possible


@functools.lru_cache(maxsize=65536)   # a name recurs in chunk after chunk
def _written(name: str) -> str | None:
    """How the text may write a name, as a regex: its core's words in order, anything but letters
    and digits between them (a model's "Breosk Associates Inc." or "BREOSK" is the text's "Breosk
    Associates"), not inside a longer word of a spaced script."""
    words = name_core_words(name)
    if not words:
        return None
    body = r"[\W_]*".join(re.escape(word) for word in words)
    start = r"(?<![^\W_])" if words[0].isascii() else ""
    end = r"(?![^\W_])" if words[-1].isascii() else ""
    return start + body + end


def introductions(text: str, names: Iterable[str]) -> list[tuple[str, str, str]]:
    """(short form, full name, sentence) of each abbreviation ``text`` introduces for one of ``names``.
    One scan of the text for all of them, longest first, so a name inside a longer one ("Kravon" in
    "Kravon Dynamics") is not found there."""
    ordered = sorted((n for n in set(names) if len(n) >= 3 and _written(n)), key=lambda n: (-len(n), n))
    possible = _abbreviated(text, ordered) if ordered else set()
    ordered = [n for n in ordered if n in possible]
    if not ordered:
        return []
    pattern = re.compile("|".join(f"({_written(name)})" for name in ordered), re.IGNORECASE)
    found: list[tuple[str, str, str]] = []
    seen: Counter[str] = Counter()
    for match in pattern.finditer(text):
        name = ordered[(match.lastindex or 1) - 1]
        seen[name] += 1
        if seen[name] > OCCURRENCES:
            continue
        shorts: list[tuple[str, bool]] = []
        # the brackets right after the name as written, its legal form included ("…有限公司（NLP）")
        tail = LEGAL_TAIL.match(text, match.end())   # it matches the empty string at least
        bracketed = _BRACKETED.match(text, tail.end() if tail else match.end())
        if bracketed:
            shorts += [(short, True) for short in _bracket_shorts(bracketed.group(1))]
        set_off = _set_off(text, match.start())
        if set_off:
            shorts += [(short, False) for short in _candidates(set_off)]
        for short, in_brackets in shorts:
            if abbreviates(short, name, bracketed=in_brackets):
                found.append((short, name, _sentence(text, match.start(), match.end())))
                break
    return found


# a stored name a batch's name may be: (the entity key it resolves to, its spelling, the entity's type)
Candidate = tuple[str, str, str]


@dataclass
class Known:
    """What the store already holds, for the names of a batch: which keys are entities, and the
    stored names (entities and merge aliases, and the rows of a commit in flight) by their loose core
    (``proxy.core.names.normalised``, what the name index files them under)."""
    is_entity: Callable[[str], bool]
    by_core: Callable[[str], list[Candidate]]
    aliases: dict[str, str]
    dismissed: set[str]


ARTICLES = frozenset({"the", "a", "an"})
LEGAL_FORMS = DROP_WORDS - ARTICLES


def same_name_core(name: str) -> str:
    """The core two spellings of one name share: ``normalised``'s, but an article only at the start
    and a legal form only at the end ("The Kravon Ltd" is "kravon"; "Hepatitis A" stays itself)."""
    words = name_tokens(strip_unspaced_forms(name))
    while words and words[0] in ARTICLES:
        words = words[1:]
    while words and words[-1] in LEGAL_FORMS:
        words = words[:-1]
    return " ".join(words)


def _compatible(a: str, b: str) -> bool:
    """Two entity types one thing may have (a type the extraction could not tell goes with any)."""
    vague = {"", OTHER.casefold(), UNKNOWN_TYPE}
    return a.casefold() == b.casefold() or a.casefold() in vague or b.casefold() in vague


@dataclass
class Resolution:
    links: list[Link]     # new aliases: their key is no entity, so nothing stored moves
    merges: list[Link]    # an entity already stored is the other name: merged once this batch is committed


def _names_of(results: Iterable[ExtractionResult]) -> Counter[str]:
    """Every spelling the results give, with how many chunks give it."""
    seen: Counter[str] = Counter()
    for result in results:
        spellings = {e.name for e in result.entities}
        spellings |= {n for r in result.relations for n in (r.source, r.target)}
        seen.update(spellings)
    return seen


def introduced(added: dict[str, ExtractionResult], texts: dict[str, str]) -> dict[str, list[tuple[str, str, str]]]:
    """Each chunk's introductions of a short form for one of the entities its extraction names."""
    found = {}
    for chunk_id, result in added.items():
        text = texts.get(chunk_id)
        if text:
            found[chunk_id] = introductions(text, sorted({e.name for e in result.entities}))
    return found


def names_asked(added: dict[str, ExtractionResult],
                intros: dict[str, list[tuple[str, str, str]]]) -> tuple[set[str], set[str]]:
    """The name keys and cores ``resolve_batch`` asks ``Known`` about."""
    names = set(_names_of(added.values())) | {short for found in intros.values() for short, _, _ in found}
    return {name_key(n) for n in names}, {normalised(n) for n in names} - {""}


def _types_of(added: dict[str, ExtractionResult]) -> dict[str, str]:
    """Each name key's type as the batch's extractions give it (the first seen)."""
    types: dict[str, str] = {}
    for result in added.values():
        for entity in result.entities:
            types.setdefault(name_key(entity.name), entity.type)
    return types


def resolve_batch(added: dict[str, ExtractionResult], intros: dict[str, list[tuple[str, str, str]]],
                  known: Known) -> Resolution:
    """The links a batch of chunks' extractions (and the short forms their texts introduce) give;
    every link points at the end of its chain (an alias of an alias is resolved once)."""
    resolution = Resolution([], [])
    target_of: dict[str, str] = {}    # key -> the key it resolves to (links made so far)
    spelled: dict[str, str] = {}
    types = _types_of(added)

    def final(key: str) -> str:
        for _ in range(8):   # chains are short; a cycle (never made) would stop here
            step = target_of.get(known.aliases.get(key, key), known.aliases.get(key, key))
            if step == key:
                break
            key = step
        return key

    def same(name: str, key: str) -> str | None:
        """The entity ``name`` is another spelling of: same strict core and a compatible type."""
        core, kind = same_name_core(name), types.get(key, "")
        for other, spelling, other_kind in batch.get(normalised(name), []) + known.by_core(normalised(name)):
            if other != key and same_name_core(spelling) == core and _compatible(kind, other_kind):
                return final(other)
        return None

    # the same name: the most mentioned spelling first, so it becomes the entity
    batch: dict[str, list[Candidate]] = {}
    spellings = _names_of(added.values())
    for name, _count in sorted(spellings.items(), key=lambda item: (-item[1], len(item[0]), item[0])):
        key = name_key(name)
        spelled.setdefault(key, name)
        if not key or not same_name_core(name) or key in known.aliases or key in target_of:
            continue
        other = None if known.is_entity(key) else same(name, key)
        if other is None or other == key or pair_key(key, other) in known.dismissed:
            batch.setdefault(normalised(name), []).append((key, name, types.get(key, "")))
            continue
        target_of[key] = other
        resolution.links.append(Link(key, other, SAME_NAME, f"{name} / {spelled.get(other, other)}"))

    # abbreviations the texts introduce
    for found in intros.values():
        for short, full, sentence in found:
            alias, target = name_key(short), final(name_key(full))
            if final(alias) == target or alias in known.aliases or alias in target_of:
                continue   # one already, or already the other name of something: left for a hand merge
            stored = alias if known.is_entity(alias) else same(short, alias)
            moved = stored if stored is not None else alias
            if moved == target or pair_key(moved, target) in known.dismissed or \
                    pair_key(alias, target) in known.dismissed:
                continue
            if known.is_entity(moved):   # an entity already: merged once the batch is committed
                resolution.merges.append(Link(moved, target, ABBREVIATION, sentence))
                continue
            for key in dict.fromkeys((moved, alias)):   # a spelling new in this batch, and the short form
                if key not in target_of and not known.is_entity(key):
                    target_of[key] = target
                    resolution.links.append(Link(key, target, ABBREVIATION, sentence))
    resolution.links = [Link(link.alias, final(link.target), link.reason, link.evidence)
                        for link in resolution.links]
    return resolution
