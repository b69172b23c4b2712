"""The knowledge base's entity names and merge aliases, for linking a question to entities
without the model (``KnowledgeStore.link_sync``).

Names are compared by their core (``proxy.core.names``): "ACME Corp." and "acme" are one name.
A question is cut into word spans, longest first and never overlapping, and each span is looked
up as a whole name: exactly, then with one typo (an insertion, deletion, substitution or swap of
neighbours) for names of ``TYPO_MIN`` characters or more. A script written without spaces is one
token a character (``proxy.core.names``), so its names are found as substrings of an unspaced
question, and the typo a character-written name tolerates is one wrong character, in names of four
characters or more (their core "奥 巴 尼 克" is seven long: shorter ones must match exactly).

One typo at a million names without a million-fold neighbourhood: a name of length L within one
edit of a span keeps either its first half or its second half intact (the edit falls in the
other one), so each name is filed under two keys, its length with its first half and its length
with its second half; a span looks up those keys for the three lengths it can come from and
checks the few candidates with a bounded edit distance. Only a swap across the middle spoils
both halves, and that one is tried directly. Two keys a name (a SymSpell deletion neighbourhood
files ~15) keep the index near 180 bytes a name; at a million names it builds in about 5 s and
links a question in well under 0.1 ms (bench/linking.py).

Derived in-memory data like the rows: built at start-up from them and the aliases, changed with
every commit under the store's memory lock.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from proxy.core.names import name_words, normalised
from proxy.text.scripts import is_unspaced
from proxy.text.stopwords import stopwords

TYPO_MIN = 6          # shorter names must match exactly: one edit turns "paris" into "parts"
MAX_SPAN_WORDS = 16   # tokens (a word, or a character of an unspaced script); longer names are linked
                      # by their own entity search, not by a span
EXACT, ALIAS, TYPO = 1.0, 0.95, 0.8   # confidence of a name, a merged-away name, a name with one typo
ALIAS_TYPO = TYPO * ALIAS

# question words that never make a name on their own ("who", "it", "this"): a span of these only
# is not looked up; inside a longer span ("bank of america") they still count
FUNCTION_WORDS = frozenset("""
about above after again against all am and any are as at be been before being below between both but by can
could did do does doing down during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom
why will with would you your yours yourself yourselves tell know many much list name named give show find
""".split())


@functools.cache
def _function_words() -> frozenset[str]:
    """``FUNCTION_WORDS`` and every language's stopwords ("的", "是", "什么"), made on first use."""
    return FUNCTION_WORDS | stopwords()


def _names_nothing(tokens: list[str]) -> bool:
    """Whether a span cannot be a name: function words only, or a lone character of an unspaced
    script (one character names too much to link by itself)."""
    if len(tokens) == 1 and len(tokens[0]) == 1 and is_unspaced(tokens[0]):
        return True
    function_words = _function_words()
    return function_words.issuperset(tokens) or "".join(tokens) in function_words

# one value (the usual case: no list per name), a few, or many: a typo bucket of a numbered series
# ("Invoice 10001"...) holds thousands of names, where growing a tuple would cost O(n) per name filed
Bucket = str | tuple[str, ...] | dict[str, None]
TUPLE_MAX = 8      # a bucket of more values becomes an insertion-ordered dict
NEAR_CAP = 256     # a typo bucket with more names than this cannot tell them apart: not searched


def _with(bucket: Bucket | None, value: str) -> Bucket:
    if bucket is None:
        return value
    if isinstance(bucket, str):
        return bucket if bucket == value else (bucket, value)
    if isinstance(bucket, dict):
        bucket[value] = None
        return bucket
    if value in bucket:
        return bucket
    return (*bucket, value) if len(bucket) < TUPLE_MAX else dict.fromkeys((*bucket, value))


def _without(bucket: Bucket | None, value: str) -> Bucket | None:
    if bucket is None or bucket == value:
        return None
    if isinstance(bucket, str):
        return bucket
    if isinstance(bucket, dict):
        bucket.pop(value, None)
        return bucket or None
    rest = tuple(v for v in bucket if v != value)
    return rest[0] if len(rest) == 1 else rest


def _values(bucket: Bucket | None) -> tuple[str, ...]:
    if bucket is None:
        return ()
    if isinstance(bucket, str):
        return (bucket,)
    return tuple(bucket) if isinstance(bucket, dict) else bucket


def _typo_candidates(bucket: Bucket | None) -> tuple[str, ...]:
    """A half's names for typo matching; none when so many share it that one edit cannot tell them
    apart (a numbered series: "Invoice 10001" is not a typo of "Invoice 10002")."""
    if isinstance(bucket, dict) and len(bucket) > NEAR_CAP:
        return ()
    return _values(bucket)


def within_one_edit(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by at most one insertion, deletion, substitution or swap of
    neighbours (optimal string alignment distance <= 1), in one pass."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    if la > lb:
        a, b, la, lb = b, a, lb, la
    i = 0
    while i < la and a[i] == b[i]:
        i += 1
    if la < lb:                                   # one deletion
        return a[i:] == b[i + 1:]
    if a[i + 1:] == b[i + 1:]:                    # one substitution
        return True
    return i + 1 < la and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]  # one swap


class NameIndex:
    def __init__(self) -> None:
        self._names: dict[str, Bucket] = {}       # name core -> entity keys with that core
        self._alias_names: dict[str, Bucket] = {}  # name core -> alias keys with that core
        self._aliases: dict[str, str] = {}        # alias key -> the entity key it resolves to
        self._starts: dict[str, Bucket] = {}      # chr(length) + first half -> cores (TYPO_MIN and longer)
        self._ends: dict[str, Bucket] = {}        # chr(length) + second half -> cores
        self.max_words = 1

    @classmethod
    def build(cls, entity_keys: Iterable[str], aliases: dict[str, str]) -> NameIndex:
        index = cls()
        for key in entity_keys:
            index.put_entity(key)
        for alias, target in aliases.items():
            index.put_alias(alias, target)
        return index

    def __len__(self) -> int:
        return len(self._names) + len(self._alias_names)

    # --- changes ---

    def put_entity(self, key: str) -> None:
        core = normalised(key)
        if core:
            self._file(self._names, key if core == key else core, key)  # most keys are their own core: one string

    def drop_entity(self, key: str) -> None:
        core = normalised(key)
        if core:
            self._unfile(self._names, core, key)

    def put_alias(self, alias: str, target: str) -> None:
        """``alias`` (a merged-away name key) resolves to ``target`` from now on."""
        self.drop_alias(alias)
        core = normalised(alias)
        if core:
            self._aliases[alias] = target
            self._file(self._alias_names, core, alias)

    def drop_alias(self, alias: str) -> None:
        if self._aliases.pop(alias, None) is not None:
            self._unfile(self._alias_names, normalised(alias), alias)

    def drop_aliases_into(self, targets: Iterable[str]) -> None:
        gone = set(targets)
        for alias in [a for a, t in self._aliases.items() if t in gone]:  # aliases are few: curated by hand
            self.drop_alias(alias)

    def _file(self, table: dict[str, Bucket], core: str, key: str) -> None:
        known = core in self._names or core in self._alias_names
        table[core] = _with(table.get(core), key)
        if not known:
            self.max_words = max(self.max_words, min(core.count(" ") + 1, MAX_SPAN_WORDS))
            if len(core) >= TYPO_MIN:
                start, end = _halves(core)
                self._starts[start] = _with(self._starts.get(start), core)
                self._ends[end] = _with(self._ends.get(end), core)

    def _unfile(self, table: dict[str, Bucket], core: str, key: str) -> None:
        rest = _without(table.get(core), key)
        if rest is not None:
            table[core] = rest
            return
        table.pop(core, None)
        if core in self._names or core in self._alias_names or len(core) < TYPO_MIN:
            return
        start, end = _halves(core)
        for pieces, piece in ((self._starts, start), (self._ends, end)):
            left = _without(pieces.get(piece), core)
            if left is None:
                pieces.pop(piece, None)
            else:
                pieces[piece] = left

    # --- lookups ---

    def resolve(self, core: str) -> list[tuple[str, float]]:
        """Entity keys named exactly ``core`` (a name's core), with their confidence."""
        found = [(key, EXACT) for key in _values(self._names.get(core))]
        found += [(self._aliases[alias], ALIAS) for alias in _values(self._alias_names.get(core))]
        return found

    def filed(self, core: str) -> list[tuple[str, str]]:
        """(entity key, name key) of every name filed under ``core``: the entities' own (the two
        keys the same) and the merge aliases' (the alias key beside the entity it resolves to)."""
        return ([(key, key) for key in _values(self._names.get(core))]
                + [(self._aliases[alias], alias) for alias in _values(self._alias_names.get(core))])

    def near(self, span: str) -> list[tuple[str, float]]:
        """Entity keys whose name is one typo away from ``span`` (not ``span`` itself)."""
        size = len(span)
        cores: set[str] = set()
        for length in (size - 1, size, size + 1):
            if length < TYPO_MIN:
                continue
            half = length // 2
            cores.update(_typo_candidates(self._starts.get(chr(length) + span[:half])))
            cores.update(_typo_candidates(self._ends.get(chr(length) + span[size - (length - half):])))
            if length == size:  # a swap across the middle spoils both halves
                swapped = span[:half - 1] + span[half] + span[half - 1] + span[half + 1:]
                if swapped in self._names or swapped in self._alias_names:
                    cores.add(swapped)
        cores.discard(span)
        found: list[tuple[str, float]] = []
        for core in sorted(cores):
            if within_one_edit(span, core):
                found += [(key, TYPO) for key in _values(self._names.get(core))]
                found += [(self._aliases[a], ALIAS_TYPO) for a in _values(self._alias_names.get(core))]
        return found

    def link(self, words: list[str]) -> list[tuple[str, float]]:
        """The entities that spans of ``words`` (``proxy.core.names.name_words`` of a text) name,
        best first: longest spans first, exact names before typos, no word in two spans; an entity
        named twice keeps its best confidence, ties in the order the text names them."""
        taken = [False] * len(words)
        best: dict[str, float] = {}
        first: dict[str, int] = {}   # where the text first names each entity
        for width in range(min(self.max_words, len(words)), 0, -1):
            spans = [(i, " ".join(words[i:i + width])) for i in range(len(words) - width + 1)
                     if not any(taken[i:i + width]) and not _names_nothing(words[i:i + width])]
            for lookup in (self.resolve, self.near):
                for i, span in spans:
                    if any(taken[i:i + width]):
                        continue
                    found = lookup(span)
                    if found:
                        taken[i:i + width] = [True] * width
                        for key, score in found:
                            best[key] = max(score, best.get(key, 0.0))
                            first[key] = min(i, first.get(key, i))
        return sorted(best.items(), key=lambda item: (-item[1], first[item[0]]))

    def link_text(self, text: str) -> list[tuple[str, float]]:
        return self.link(name_words(text))


def _halves(core: str) -> tuple[str, str]:
    """The two keys ``core`` is filed under for typo lookups."""
    length, half = len(core), len(core) // 2
    return chr(length) + core[:half], chr(length) + core[half:]
