"""The evidence layout of the context (the ``context_layout`` knob at ``evidence``): a small budget
spent on the facts that carry the answer before long passages.

    facts      one short line per relation, best evidence first (``evidence_rank``): its
               description alone when it names both entities, else "A — B: description"
    communities  the community summaries found (global questions), from the entity budget first
    entities   one short line each: name, type and the notes of its description the facts above
               do not state (nothing twice), those about what the question asks first, cut short
    passages   the chunks, with what the facts and entities left of the budget

The sections keep their ceilings (``max_relation_tokens``, ``max_entity_tokens``); what they do
not use goes to the passages. The references still name each passage's document.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

from proxy.core.tokens import Tokenizer
from proxy.retrieval.context import Context, Section, assemble, header_text
from proxy.retrieval.found import FoundChunk, FoundCommunity, FoundEntity, FoundRelation
from proxy.retrieval.wording import ENGLISH, Wording
from proxy.text.fold import fold
from proxy.text.sentences import split_notes
from proxy.text.word_forms import relation_words
from proxy.text.words import stems, strong, without_names

uncached_stems = stems.__wrapped__

RELATION_TOKENS = 80   # a relation merged from many notes is cut: its first notes carry its gist
ENTITY_TOKENS = 48     # an entity's line is a pointer (type, gist); its facts are the relations'
NAMED_ENTITY_TOKENS = 160  # but one the question names is what it asks about: the founding year, the
                           # headcount or the revenue it compares or lists may be any of its notes
NAMED_SHARE = 0.5      # ... and the entities it names share up to this part of the section, when that is more
COMMUNITY_TOKENS = 200  # a community's summary: its members and what joins them
CHARS_PER_TOKEN_MAX = 12  # more characters than a line's token limit can ever take (cl100k: ~4 a token)
NOTES_CHARS = 4096     # the part of a hub's long description whose notes an entity line chooses from


@functools.lru_cache(maxsize=4096)   # the kept facts' notes, split again in every turn that keeps them
def notes(description: str) -> tuple[str, ...]:
    """A description's notes: its lines and sentences, normalised for comparison."""
    return tuple(note_key(p) for p in split_notes(description))


def note_key(note: str) -> str:
    """A note as it is compared: folded, spaces collapsed, no final full stop."""
    return fold(" ".join(note.split())).rstrip(".。")


@functools.lru_cache(maxsize=2048)   # an entity's line is made again in every turn that finds it
def described_notes(description: str) -> tuple[tuple[str, str, frozenset[str]], ...]:
    """A description's notes: each as written (spaces collapsed), as compared (``note_key``), and
    its stems. Cached per description, not per note: a hub's many notes would crowd the notes that
    recur out of the stems' own cache."""
    notes = [" ".join(note.split()) for note in split_notes(description)]
    return tuple((note, note_key(note), uncached_stems(note)) for note in notes)


def relation_text(r: FoundRelation) -> str:
    description = " ".join(r.description.split())
    folded = description.casefold()
    if description and r.source_name.casefold() in folded and r.target_name.casefold() in folded:
        return f"- {description}"
    return f"- {r.source_name} — {r.target_name}: {description or ', '.join(r.keywords)}"


def community_text(c: FoundCommunity) -> str:
    summary = " ".join(c.summary.split())
    return f"- {c.title}: {summary}" if c.title else f"- {summary}"


def entity_text(e: FoundEntity, stated: set[str], asked: frozenset[str] = frozenset(), focused: bool = False) -> str:
    """Name and type, then the notes of its description that no fact above states, those holding
    the question's words (``asked``: their stems, the names it gives left out) first: a line is cut
    at ``ENTITY_TOKENS``, and the founding year or the headcount a question compares may be any
    note of a merged description. ``focused`` (an entity the question does not name): only the notes
    that meet a question word, when any does; the others would crowd the next candidates out of the
    section ("which firms are active in the aviation sector?" is answered by a list of lines)."""
    described = [(note, key, found) for note, key, found in described_notes(e.description[:NOTES_CHARS])
                 if key not in stated]
    if not described:
        return f"- {e.name} ({e.type})"
    fresh = [note for note, _, _ in described]
    wanted = without_names(asked, (e.name,))
    if wanted:
        shared = [found & wanted for _, _, found in described]
        order = sorted(range(len(fresh)), key=lambda i: (-len(shared[i]), i))
        if focused:
            order = [i for i in order if strong(shared[i])] or order
        fresh = [fresh[i] for i in order]
    return f"- {e.name} ({e.type}): " + "".join(joined(fresh))


def joined(parts: list[str]) -> Iterator[str]:
    """The notes with a space between them, but none after a CJK full stop."""
    for i, part in enumerate(parts):
        yield part if i == 0 or parts[i - 1].endswith(("。", "！", "？", "；", "｡")) else " " + part


def fit_capped(lines: Iterable[str | tuple[str, int]], limit: int, budget: int,
               tokenizer: Tokenizer) -> tuple[list[str], int]:
    """The leading lines that fit ``budget`` (each cut to ``limit`` tokens first, or to the limit it
    comes with), and the tokens they use. Lines past the budget are never made or counted (``lines``
    may be lazy): a hub gives hundreds, a small budget takes a few dozen."""
    kept: list[str] = []
    used = 0
    default = limit
    for item in lines:
        line, limit = item if isinstance(item, tuple) else (item, default)
        line = line[:limit * CHARS_PER_TOKEN_MAX]   # a hub's description can be long: never tokenise all of it
        count = tokenizer.count(line)
        if count > limit:
            line, count = cut(tokenizer, line, limit) + " …", limit + 2
        if used + count + 1 > budget:
            break
        kept.append(line)
        used += count + 1
    return kept, used


@functools.lru_cache(maxsize=4096)   # the same hub's long description is cut turn after turn
def cut(tokenizer: Tokenizer, line: str, limit: int) -> str:
    return tokenizer.truncate(line, limit)


def build_evidence_context(entities: list[FoundEntity], relations: list[FoundRelation], chunks: list[FoundChunk], *,
                           entity_budget: int, relation_budget: int, total_budget: int, tokenizer: Tokenizer,
                           instructions: str | None = None, communities: list[FoundCommunity] | None = None,
                           wording: Wording = ENGLISH, question: str = "",
                           named: frozenset[str] = frozenset(), described: int = 0) -> Context:
    """``named``: the keys of the entities the question names (linked, by any of their names, or by
    an earlier turn of a follow-up); one whose name the question spells counts too. ``described``:
    how many leading ``entities`` a question naming none asks for ("which firms are active in the
    aviation sector?"): those lines are the answer, so they come out of the whole graph budget
    (entities' and facts') first, and the facts and the other entities share what they leave."""
    header = header_text(instructions, wording)
    header_tokens = tokenizer.count(header)
    communities = communities or []
    # facts: each distinct statement once
    unique: list[FoundRelation] = []

    def distinct() -> Iterator[str]:
        seen: set[str] = set()
        for relation in relations:
            text = relation_text(relation)
            if text not in seen:
                seen.add(text)
                unique.append(relation)
                yield text

    asked = relation_words(question, [e.name for e in entities])
    # the entities a question naming none asks for: out of both sections' budgets, the entities' first
    d_lines, d_used = fit_capped((entity_text(e, set(), asked, focused=True) for e in entities[:described]),
                                 ENTITY_TOKENS, entity_budget + relation_budget, tokenizer)
    from_entities = min(d_used, entity_budget)
    entity_budget, relation_budget = entity_budget - from_entities, relation_budget - (d_used - from_entities)
    r_lines, r_used = fit_capped(distinct(), RELATION_TOKENS, relation_budget, tokenizer)
    kept_relations = unique[:len(r_lines)]
    stated = {note for r in kept_relations for note in notes(r.description)}
    # communities: their summaries, from the entity budget first (the entities are pointers)
    c_lines, c_used = fit_capped((community_text(c) for c in communities), COMMUNITY_TOKENS, entity_budget // 2,
                                 tokenizer)
    # entities: name and type, and the notes the facts do not state, those the question asks about first
    # (the names it gives are left out: in "which was founded first, X or Y?" a note of X naming Y is not)
    folded = question.casefold()

    def is_subject(e: FoundEntity) -> bool:
        return e.key in named or e.name.casefold() in folded

    subjects = sum(1 for e in entities if is_subject(e))
    named_limit = max(NAMED_ENTITY_TOKENS, int(entity_budget * NAMED_SHARE) // max(subjects, 1))

    def entity_line(e: FoundEntity) -> tuple[str, int]:
        if is_subject(e):
            return entity_text(e, stated, asked), named_limit
        return entity_text(e, stated, asked, focused=True), ENTITY_TOKENS

    others = entities[described:] if len(d_lines) == described else []   # all the described fitted, or none else
    e_lines, e_used = fit_capped((entity_line(e) for e in others), ENTITY_TOKENS, entity_budget - c_used, tokenizer)
    kept_entities = entities[:len(d_lines)] + others[:len(e_lines)]
    e_lines, e_used = d_lines + e_lines, d_used + e_used
    return assemble(header, header_tokens, [
        Section("relations", wording.facts, kept_relations, r_lines, r_used),
        Section("communities", wording.communities, communities[:len(c_lines)], c_lines, c_used),
        Section("entities", wording.entities, kept_entities, e_lines, e_used),
    ], chunks, total_budget, tokenizer, wording)
