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

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.core.names import name_core_words, normalised
from proxy.extraction.results import ExtractionResult, name_key
from proxy.store.changes import pair_key
from proxy.text.fold import fold, unaccented
from proxy.text.scripts import has_unspaced

SAME_NAME, ABBREVIATION = "same name", "abbreviation"
SHORT_MAX = 12            # characters of a short form
OCCURRENCES = 8           # occurrences of a name looked at in one chunk
EVIDENCE_MAX = 300        # characters of the sentence kept as evidence
_BRACKETED = re.compile(r"\s*[(（\[]([^()（）\[\]\n]{1,40})[)）\]]")
# before a name: a short form, a comma, colon or dash, then at most three spaced words or four
# characters of an unspaced script
_SET_OFF = re.compile(r"([^\s,，:：;；—–()（）\[\]]+)\s*[,，:：—–]\s*"
                      r"(?:(?:[^\s,，:：;；]+\s+){0,3}|[^\s,，:：;；]{0,4})$")
_PIECE = re.compile(r"[^\s,，:：;；、/]+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")


@dataclass(frozen=True)
class Link:
    alias: str       # the name key that resolves to ``target`` from now on
    target: str      # an entity key
    reason: str      # SAME_NAME | ABBREVIATION
    evidence: str    # what said so: the two spellings, or the sentence introducing the short form


def abbreviates(short: str, full: str, *, bracketed: bool = False) -> bool:
    """Whether ``short`` can be a short form of the name ``full``: shorter, beginning with the same
    letter or character, and either an acronym (capitals and digits: "KVD", "KV2") or the full
    name's letters in order ("Kravon", "北大" of "北京大学"). In brackets right after a name in a
    script without spaces, a name in Latin letters is one too ("克拉冯兄弟（KVB）")."""
    short = short.strip()
    if bracketed and has_unspaced(full) and short.isascii() and short.isalnum() and not short.isdigit():
        return 2 <= len(short) <= SHORT_MAX and normalised(short) != ""
    folded_short, folded_full = unaccented(fold(short)), unaccented(fold(full))
    compact = "".join(folded_short.split())
    letters = "".join(ch for ch in folded_full if ch.isalnum())
    if not 2 <= len(compact) <= SHORT_MAX or len(compact) >= len(letters) or compact[0] != letters[0]:
        return False
    if normalised(short) == normalised(full) or not normalised(short):
        return False
    if short.isascii() and short.isalnum() and short.upper() == short and sum(c.isalpha() for c in short) >= 2:
        return True
    rest = iter(letters)
    return all(ch in rest for ch in compact)   # a subsequence: each character found after the last


def _candidates(piece: str) -> list[str]:
    """Short forms a piece of text may hold, longest first: the piece, and for an unspaced run the
    ends of it too ("简称北大" holds "北大")."""
    piece = piece.strip()
    if not has_unspaced(piece):
        return [piece]
    return [piece[i:] for i in range(len(piece) - 1)]


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` around ``start:end``, at most EVIDENCE_MAX characters."""
    left = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    found = _SENTENCE_END.search(text, end)
    right = found.start() if found else len(text)
    return " ".join(text[left:right].split())[:EVIDENCE_MAX]


def _written(name: str) -> re.Pattern[str] | None:
    """How the text may write a name: its core's words in order, anything but letters and digits
    between them (a model's "Breosk Associates Inc." or "BREOSK" is the text's "Breosk Associates")."""
    words = name_core_words(name)
    if not words:
        return None
    body = r"[\W_]*".join(re.escape(word) for word in words)
    start = r"(?<![^\W_])" if words[0].isascii() else ""    # not inside a longer word of a spaced script
    end = r"(?![^\W_])" if words[-1].isascii() else ""
    return re.compile(start + body + end, re.IGNORECASE)


def introductions(text: str, names: Iterable[str]) -> list[tuple[str, str, str]]:
    """(short form, full name, sentence) of each abbreviation ``text`` introduces for one of ``names``."""
    found: list[tuple[str, str, str]] = []
    for name in names:
        if len(name) < 3:
            continue
        pattern = _written(name)
        for count, match in enumerate(pattern.finditer(text) if pattern else ()):
            if count == OCCURRENCES:
                break
            shorts: list[tuple[str, bool]] = []
            bracketed = _BRACKETED.match(text, match.end())
            if bracketed:
                pieces = _PIECE.findall(bracketed.group(1))
                shorts += [(short, True) for short in (_candidates(pieces[-1]) if pieces else [])]
            set_off = _SET_OFF.search(text, max(0, match.start() - 80), match.start())
            if set_off:
                shorts += [(short, False) for short in _candidates(set_off.group(1))]
            for short, in_brackets in shorts:
                if abbreviates(short, name, bracketed=in_brackets):
                    found.append((short, name, _sentence(text, match.start(), match.end())))
                    break
    return found


@dataclass
class Known:
    """What the store already holds, for the names of a batch: which keys are entities, and the
    entity each name core names (stored entities and merge aliases, and the rows of a commit in flight)."""
    is_entity: Callable[[str], bool]
    by_core: Callable[[str], str | None]
    aliases: dict[str, str]
    dismissed: set[str]


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


def resolve_batch(added: dict[str, ExtractionResult], intros: dict[str, list[tuple[str, str, str]]],
                  known: Known) -> Resolution:
    """The links a batch of chunks' extractions (and the short forms their texts introduce) give."""
    resolution = Resolution([], [])
    target_of: dict[str, str] = {}    # key -> the key it resolves to (links made so far)
    spelled: dict[str, str] = {}

    def final(key: str) -> str:
        key = known.aliases.get(key, key)
        return target_of.get(key, key)

    # the same name: the most mentioned spelling of a core first, so it becomes the entity
    spellings = _names_of(added.values())
    by_core: dict[str, str] = {}
    for name, _count in sorted(spellings.items(), key=lambda item: (-item[1], len(item[0]), item[0])):
        key = name_key(name)
        spelled.setdefault(key, name)
        if not key or key in known.aliases or key in target_of:
            continue
        core = normalised(name)
        if not core:
            continue
        if known.is_entity(key):
            by_core.setdefault(core, key)
            continue
        other = by_core.get(core) or known.by_core(core)
        if other is None or other == key:
            by_core.setdefault(core, key)
            continue
        other = final(other)
        if other != key and pair_key(key, other) not in known.dismissed:
            target_of[key] = other
            resolution.links.append(Link(key, other, SAME_NAME, f"{name} / {spelled.get(other, other)}"))

    # abbreviations the texts introduce
    for found in intros.values():
        for short, full, sentence in found:
            alias, target = name_key(short), final(name_key(full))
            if alias == target or final(alias) == target or pair_key(alias, target) in known.dismissed:
                continue
            if alias in known.aliases or alias in target_of:
                continue   # already the other name of something: left for a hand merge
            stored = known.by_core(normalised(short))
            link = Link(alias, target, ABBREVIATION, sentence)
            if known.is_entity(alias) or (stored is not None and final(stored) != target):
                if known.is_entity(alias):
                    resolution.merges.append(link)
                elif stored is not None:
                    resolution.merges.append(Link(final(stored), target, ABBREVIATION, sentence))
                continue
            target_of[alias] = target
            resolution.links.append(link)
    return resolution
