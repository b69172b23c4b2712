"""The context given to the model: instructions, entities, relations, chunks and references,
fitted to the token budget. Ranking first, truncation second: the best items survive a small
budget, and every section keeps at least one item when it has any. The instructions and headings
are the turn's language's (``wording.py``), and counted as such."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.tokens import Tokenizer
from proxy.retrieval.found import FoundChunk, FoundCommunity, FoundEntity, FoundRelation
from proxy.retrieval.wording import ENGLISH, Wording


@dataclass
class Context:
    text: str
    entities: list[FoundEntity]
    relations: list[FoundRelation]
    chunks: list[FoundChunk]
    references: list[tuple[int, str]]
    tokens: dict[str, int] = field(default_factory=dict)
    communities: list[FoundCommunity] = field(default_factory=list)
    skipped: str | None = None   # why nothing could be given (the budget cannot hold the instructions)
    language: str = ENGLISH.language   # the language it is worded in (``wording.py``)


def entity_line(e: FoundEntity) -> str:
    return json.dumps({"entity": e.name, "type": e.type, "description": e.description}, ensure_ascii=False)


def relation_line(r: FoundRelation) -> str:
    return json.dumps({"entity1": r.source_name, "entity2": r.target_name, "keywords": ", ".join(r.keywords),
                       "description": r.description}, ensure_ascii=False)


def fit(lines: list[str], budget: int, tokenizer: Tokenizer) -> tuple[list[int], int]:
    """Indexes of the leading lines that fit ``budget``; at least the first (``cut_first`` trims it)."""
    kept: list[int] = []
    used = 0
    for i, cost in enumerate(c + 1 for c in tokenizer.count_many(lines)):
        if used + cost > budget:
            break
        kept.append(i)
        used += cost
    if not kept and lines:
        kept, used = [0], min(tokenizer.count(lines[0]) + 1, max(budget, 1))
    return kept, used


def cut_first(lines: list[str], kept: list[int], used: int, tokenizer: Tokenizer) -> None:
    """A section's only line, when over its budget, is cut to fit (so the window is never exceeded)."""
    if kept == [0] and tokenizer.count(lines[0]) + 1 > used:
        lines[0] = tokenizer.truncate(lines[0], max(used - 1, 1))


def references_for(chunks: list[FoundChunk]) -> list[tuple[int, str]]:
    """Documents numbered by how many selected chunks cite them (ties: first cited first)."""
    cited = Counter(c.documents[0] for c in chunks if c.documents)
    order = {name: i for i, name in reversed(list(enumerate(c.documents[0] for c in chunks if c.documents)))}
    ranked = sorted(cited, key=lambda name: (-cited[name], order[name]))
    return [(n, name) for n, name in enumerate(ranked, start=1)]


def header_text(instructions: str | None, wording: Wording = ENGLISH) -> str:
    extra = f"\n\n{wording.user_instructions}\n{instructions}" if instructions else ""
    return wording.instructions + extra


def build_context(entities: list[FoundEntity], relations: list[FoundRelation], chunks: list[FoundChunk], *,
                  entity_budget: int, relation_budget: int, total_budget: int, tokenizer: Tokenizer,
                  instructions: str | None = None, communities: list[FoundCommunity] | None = None,
                  wording: Wording = ENGLISH) -> Context:
    """The ``sections`` layout: entities, relations and passages, each up to its own ceiling (the
    community summaries, when there are any, from the entity budget first)."""
    header = header_text(instructions, wording)
    header_tokens = tokenizer.count(header)
    communities = communities or []
    c_lines = [json.dumps({"community": c.title, "summary": c.summary}, ensure_ascii=False) for c in communities]
    c_keep, c_used = fit(c_lines, entity_budget // 2, tokenizer) if communities else ([], 0)
    e_lines = [entity_line(e) for e in entities]
    e_keep, e_used = fit(e_lines, entity_budget - c_used, tokenizer)
    cut_first(e_lines, e_keep, e_used, tokenizer)
    r_lines = [relation_line(r) for r in relations]
    r_keep, r_used = fit(r_lines, relation_budget, tokenizer)
    cut_first(r_lines, r_keep, r_used, tokenizer)
    kept_entities = Section("entities", wording.entities, [entities[i] for i in e_keep],
                            [e_lines[i] for i in e_keep], e_used)
    kept_relations = Section("relations", wording.relations, [relations[i] for i in r_keep],
                             [r_lines[i] for i in r_keep], r_used)
    kept_communities = Section("communities", wording.communities,
                               [communities[i] for i in c_keep], [c_lines[i] for i in c_keep], c_used)
    return assemble(header, header_tokens, [kept_communities, kept_entities, kept_relations], chunks, total_budget,
                    tokenizer, wording)


@dataclass
class Section:
    """A graph section as chosen: its kind (entities, relations, communities), heading, items,
    lines and tokens."""
    kind: str
    heading: str
    items: list[Any]
    lines: list[str]
    tokens: int


SEPARATOR = 1   # "\n\n" between two parts of the context is one token
# a token kept per line break: the tokenizer may merge a line's last characters with the break
# (cl100k: rarely one token more than the parts counted apart), and the whole text is never
# counted again (recounting 30,000 tokens costs ~18 ms a turn; the parts' counts are cached)
BREAK_SLACK = 1
MIN_PASSAGE_TOKENS = 16   # a passage cut shorter than this says nothing: none is given instead
MAX_ONE_TOKEN_NUMBER = 999   # cl100k splits digits in threes and has a token for each: "7" and "642" cost one


def block_tokens(heading: str, lines: list[str], tokenizer: Tokenizer) -> int:
    """What a section adds to the context, counted by parts, with the slack its line breaks need:
    the separator before it, its heading and its lines (each with its line break)."""
    if not lines:
        return 0
    return (SEPARATOR + tokenizer.count(heading) + sum(c + 1 for c in tokenizer.count_many(lines))
            + BREAK_SLACK * (len(lines) + 1))


def fit_graph(graph: list[Section], room: int, tokenizer: Tokenizer) -> list[Section]:
    """The graph sections within ``room`` (what the header leaves of the total): while they take
    more, the section that takes most loses its last line (its lowest-ranked item)."""
    graph = [replace(section) for section in graph if section.items]
    costs = [block_tokens(s.heading, s.lines, tokenizer) for s in graph]
    while graph and sum(costs) > room:
        i = max(range(len(graph)), key=costs.__getitem__)
        section = graph[i]
        lines = section.lines[:-1]
        graph[i] = replace(section, items=section.items[:len(lines)], lines=lines,
                           tokens=sum(c + 1 for c in tokenizer.count_many(lines)))
        costs[i] = block_tokens(section.heading, lines, tokenizer)
        if not lines:
            del graph[i], costs[i]
    return graph


def passage_line(chunk: FoundChunk, reference: int | None) -> str:
    return json.dumps({"reference_id": reference, "content": chunk.content}, ensure_ascii=False)


def reference_line(number: int, name: str) -> str:
    return f"[{number}] {name}"


def fit_passages(chunks: list[FoundChunk], room: int, tokenizer: Tokenizer,
                 wording: Wording = ENGLISH) -> list[FoundChunk]:
    """The leading chunks whose passages, with the reference list they need, fit ``room`` (both
    headings included). When not even the first fits whole, it is cut to fit (a section keeps one
    item when it has any), unless what would be left of it is too short to say anything."""
    base = (2 * (SEPARATOR + BREAK_SLACK) + tokenizer.count(wording.passages)
            + tokenizer.count(wording.references))
    used, cited = base, set[str | None]()
    kept: list[FoundChunk] = []
    for chunk in chunks:
        cost = passage_cost(chunk, len(cited) + 1, document_of(chunk) not in cited, tokenizer)
        if used + cost > room:
            break
        kept.append(chunk)
        used += cost
        cited.add(document_of(chunk))
    if kept or not chunks:
        return kept
    first = chunks[0]
    left = room - base - passage_cost(replace(first, content=""), 1, True, tokenizer)
    while left >= MIN_PASSAGE_TOKENS:
        cut = replace(first, content=tokenizer.truncate(first.content, left))
        over = base + passage_cost(cut, 1, True, tokenizer) - room   # JSON escapes may cost more than the text
        if over <= 0:
            return [cut]
        left -= over
    return []


def document_of(chunk: FoundChunk) -> str | None:
    return chunk.documents[0] if chunk.documents else None


def passage_cost(chunk: FoundChunk, number: int, new_reference: bool, tokenizer: Tokenizer) -> int:
    """A passage's line and, when it cites a document not cited yet, that document's reference line
    (numbers of up to three digits are one token: the final numbering costs the same)."""
    document = document_of(chunk)
    cost = line_cost(counted_passage_line(chunk, None if document is None else number), tokenizer)
    if document is not None and new_reference:
        cost += line_cost(reference_line(counted_as(number), document), tokenizer)
    return cost


def counted_passage_line(chunk: FoundChunk, number: int | None) -> str:
    """The passage line whose tokens are counted for ``chunk`` at ``number`` (``counted_as``)."""
    return passage_line(chunk, None if number is None else counted_as(number))


def counted_as(number: int) -> int:
    """The number a numbered line is counted with: 1 for any up to 999 (the same tokens), so that a
    chunk's line is tokenised once, not again in every turn that cites it at another place."""
    return 1 if number <= MAX_ONE_TOKEN_NUMBER else number


def line_cost(line: str, tokenizer: Tokenizer) -> int:
    """A line's tokens, its line break and the break's slack."""
    return tokenizer.count(line) + 1 + BREAK_SLACK


def assemble(header: str, header_tokens: int, graph: list[Section], chunks: list[FoundChunk],
             total_budget: int, tokenizer: Tokenizer, wording: Wording = ENGLISH) -> Context:
    """The context: the header, the graph sections in order, then the passages that fit what is
    left with the references they cite. The whole text is held to ``total_budget`` as the
    tokenizer counts it: every part is counted (lines, headings, separators, a token of slack per
    line break), the graph sections lose their last lines when the header leaves them too little,
    and nothing is given when the budget cannot hold the header itself."""
    if header_tokens > total_budget:
        return Context("", [], [], [], [], {"instructions": header_tokens, "total": 0},
                       skipped=f"the context budget ({total_budget} tokens) cannot hold the instructions "
                               f"({header_tokens} tokens): raise max_total_tokens", language=wording.language)
    graph = fit_graph(graph, total_budget - header_tokens, tokenizer)
    graph_tokens = sum(block_tokens(s.heading, s.lines, tokenizer) for s in graph)
    kept_chunks = fit_passages(chunks, total_budget - header_tokens - graph_tokens, tokenizer, wording)
    references = references_for(kept_chunks)
    number = {name: n for n, name in references}
    numbers = [number.get(c.documents[0]) if c.documents else None for c in kept_chunks]
    passage_lines = [passage_line(c, n) for c, n in zip(kept_chunks, numbers, strict=True)]
    reference_lines = [reference_line(n, name) for n, name in references]
    # each line's count as ``fit_passages`` took it (``counted_as``): the lines with their places'
    # numbers would be tokenised again every turn
    passage_counts = [tokenizer.count(counted_passage_line(c, n)) for c, n in zip(kept_chunks, numbers, strict=True)]
    reference_counts = [tokenizer.count(reference_line(counted_as(n), name)) for n, name in references]
    sections = [header]
    sections += [f"{section.heading}\n" + "\n".join(section.lines) for section in graph]
    if kept_chunks:
        sections.append(f"{wording.passages}\n" + "\n".join(passage_lines))
    if references:
        sections.append(f"{wording.references}\n" + "\n".join(reference_lines))
    text = "\n\n".join(sections)
    # counted by parts (each line's count is cached): recounting 10k+ tokens per turn costs ~10 ms
    chunk_tokens = sum(c + 1 for c in passage_counts)
    by_kind = {section.kind: section for section in graph}
    empty = Section("", "", [], [], 0)
    entities, relations = by_kind.get("entities", empty), by_kind.get("relations", empty)
    communities = by_kind.get("communities", empty)
    tokens = {"instructions": header_tokens, "entities": entities.tokens, "relations": relations.tokens,
              **({"communities": communities.tokens} if communities.items else {}), "chunks": chunk_tokens}
    parts = [block_tokens(s.heading, s.lines, tokenizer) - BREAK_SLACK * (len(s.lines) + 1) for s in graph]
    parts += [SEPARATOR + tokenizer.count(heading) + sum(c + 1 for c in counts)
              for heading, counts in ((wording.passages, passage_counts), (wording.references, reference_counts))
              if counts]
    tokens["total"] = header_tokens + sum(parts)   # the text's tokens, counted by parts
    return Context(text, entities.items, relations.items, kept_chunks, references, tokens, communities.items,
                   language=wording.language)


def context_summary(context: Context) -> dict[str, Any]:
    return {"entities": [e.name for e in context.entities],
            "relations": [[r.source_name, r.target_name] for r in context.relations],
            "chunks": [c.id for c in context.chunks], "tokens": context.tokens, "language": context.language}


def inject(messages: list[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """Our block joins the client's front system message, or becomes one; nothing else changes."""
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        content = first.get("content")
        if isinstance(content, list):
            merged = {**first, "content": [*content, {"type": "text", "text": block}]}
        else:
            merged = {**first, "content": f"{content}\n\n{block}" if content else block}
        return [merged, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]
