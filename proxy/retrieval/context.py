"""The context given to the model: instructions, entities, relations, chunks and references,
fitted to the token budget. Ranking first, truncation second: the best items survive a small
budget, and every section keeps at least one item when it has any."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.core.tokens import Tokenizer
from proxy.retrieval.found import FoundChunk, FoundCommunity, FoundEntity, FoundRelation

INSTRUCTIONS = """You answer questions using the knowledge base context below: facts from a knowledge \
graph (entities and their relations) and passages from the user's documents.
- Base the answer on this context. If the context does not contain the answer, say so plainly \
instead of guessing; you may then add what you know in general, clearly marked as not from the documents.
- Answer in the language of the user's question.
- Cite the passages you use as [n], with n from the reference list, and end with a short "References" \
list of the documents you cited."""


@dataclass
class Context:
    text: str
    entities: list[FoundEntity]
    relations: list[FoundRelation]
    chunks: list[FoundChunk]
    references: list[tuple[int, str]]
    tokens: dict[str, int] = field(default_factory=dict)
    communities: list[FoundCommunity] = field(default_factory=list)


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


def header_text(instructions: str | None) -> str:
    return INSTRUCTIONS + (f"\n\nAdditional instructions from the user:\n{instructions}" if instructions else "")


def build_context(entities: list[FoundEntity], relations: list[FoundRelation], chunks: list[FoundChunk], *,
                  entity_budget: int, relation_budget: int, total_budget: int, tokenizer: Tokenizer,
                  instructions: str | None = None, communities: list[FoundCommunity] | None = None) -> Context:
    """The ``sections`` layout: entities, relations and passages, each up to its own ceiling (the
    community summaries, when there are any, from the entity budget first)."""
    header = header_text(instructions)
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
    kept_entities = Section("entities", "## Entities (knowledge graph)", [entities[i] for i in e_keep],
                            [e_lines[i] for i in e_keep], e_used)
    kept_relations = Section("relations", "## Relations (knowledge graph)", [relations[i] for i in r_keep],
                             [r_lines[i] for i in r_keep], r_used)
    kept_communities = Section("communities", "## Communities (summaries of related entities)",
                               [communities[i] for i in c_keep], [c_lines[i] for i in c_keep], c_used)
    return assemble(header, header_tokens, [kept_communities, kept_entities, kept_relations], chunks, total_budget,
                    tokenizer)


@dataclass
class Section:
    """A graph section as chosen: its kind (entities, relations, communities), heading, items,
    lines and tokens."""
    kind: str
    heading: str
    items: list[Any]
    lines: list[str]
    tokens: int


def assemble(header: str, header_tokens: int, graph: list[Section], chunks: list[FoundChunk],
             total_budget: int, tokenizer: Tokenizer) -> Context:
    """The context: the header, the graph sections in order, then the passages that fit what is
    left (once a reference list of about 12 tokens per document is counted), then the references."""
    chunk_budget = total_budget - header_tokens - sum(section.tokens for section in graph) - 40
    chunk_lines = [json.dumps({"reference_id": 0, "content": c.content}, ensure_ascii=False) for c in chunks]
    c_keep, c_used = fit(chunk_lines, chunk_budget - 12 * min(len(chunks), 10), tokenizer) if chunks else ([], 0)
    kept_chunks = [chunks[i] for i in c_keep]
    if len(kept_chunks) == 1 and c_used < tokenizer.count(chunk_lines[c_keep[0]]):
        first = kept_chunks[0]
        kept_chunks = [FoundChunk(first.id, tokenizer.truncate(first.content, max(c_used - 20, 1)), first.tokens,
                                  first.score, first.origin, first.documents)]
    references = references_for(kept_chunks)
    number = {name: n for n, name in references}
    passage_lines = [json.dumps({"reference_id": number.get(c.documents[0]) if c.documents else None,
                                 "content": c.content}, ensure_ascii=False) for c in kept_chunks]
    sections = [header]
    sections += [f"{section.heading}\n" + "\n".join(section.lines) for section in graph if section.items]
    if kept_chunks:
        sections.append("## Document passages\n" + "\n".join(passage_lines))
    reference_text = "## References\n" + "\n".join(f"[{n}] {name}" for n, name in references) if references else ""
    if references:
        sections.append(reference_text)
    text = "\n\n".join(sections)
    # counted by parts (each line's count is cached): recounting 10k+ tokens per turn costs ~10 ms
    chunk_tokens = sum(c + 1 for c in tokenizer.count_many(passage_lines))
    by_kind = {section.kind: section for section in graph}
    empty = Section("", "", [], [], 0)
    entities, relations = by_kind.get("entities", empty), by_kind.get("relations", empty)
    communities = by_kind.get("communities", empty)
    tokens = {"instructions": header_tokens, "entities": entities.tokens, "relations": relations.tokens,
              **({"communities": communities.tokens} if communities.items else {}), "chunks": chunk_tokens}
    tokens["total"] = sum(tokens.values()) + tokenizer.count(reference_text) + 8 * (len(sections) - 1)
    return Context(text, entities.items, relations.items, kept_chunks, references, tokens, communities.items)


def context_summary(context: Context) -> dict[str, Any]:
    return {"entities": [e.name for e in context.entities],
            "relations": [[r.source_name, r.target_name] for r in context.relations],
            "chunks": [c.id for c in context.chunks], "tokens": context.tokens}


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
