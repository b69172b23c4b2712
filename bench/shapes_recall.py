"""Context recall on questions of many shapes (issue 32, item 6): the yardstick for grounding that must
hold for question shapes no earlier bench asked.

The world (bench/shapes_world.py: ~250 documents of industrial firms, their people, products, deals
and figures among trade-press prose) is ingested through /rag/documents of the real app in-process,
its upstream the fake Ollama answering extraction with bench/shapes_oracle.py: ``perfect`` (what a
good model gives under GraphGate's extraction prompt and schema) or ``noisy`` (15 % of a passage's
entities written another way: case, "Inc."/"Ltd"/"GmbH", a leading "The"; 10 % of its relations
dropped; seeded). ``--language`` picks the world's language: ``en``, ``zh`` (bench/shapes_zh.py: the same
facts in Chinese, names transliterated, Chinese short forms and name variants), or both. Each language,
extractor and embedder (bench/multihop_recall.py's: ``hash``, ``minilm``,
``bigram``, ``multilingual``) gets its own store.

Every question is asked through /rag/query (mix mode unless ``--mode``) at each budget (entity and
relation budgets scaled as bench/multihop_recall.py does), with the oracle keywords (the names the
question gives, or for a follow-up the name its earlier turn gave; the shape's themes) or with
``keywords=off``; a follow-up's earlier turns go in /rag/query's ``history``. A question counts when
every gold name is in the injected context (a whole name, folded as GraphGate folds text, or written
as the noisy extractor may write it: "KRAVON BROTHERS" is Kravon Brothers to a reader, and 贝温尔兄弟
or 貝溫爾兄弟集團 is 贝温尔兄弟集团). Each shape is reported on its own, with "all";
for updated facts also how often the stale value was in the context too. Beside each store: its
entity count against the world's true count (an alias and its full name are one entity; a perfect
extraction leaves them two, as it leaves the noisy name variants apart unless GraphGate merges them).

    python bench/shapes_recall.py [--language en zh] [--docs 250] [--budgets 2000 4000 8000] [--extractor perfect noisy]
                                  [--embedders hash minilm] [--keywords oracle off] [--store DIR]
                                  [--json FILE] [--misses N] [--set KNOB=VALUE ...]

``--store DIR`` keeps each ingested store (named by language, extractor, embedder and a digest of
the world and noise) and reuses it on the next run: only the questions run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.multihop_oracle import holds  # noqa: E402
from bench.multihop_recall import EMBEDDERS, Cell, gateway, ingest, parse_knob, query_body, upstream  # noqa: E402
from bench.multihop_world import Question  # noqa: E402
from bench.shapes_oracle import Noise, ShapesExtractor  # noqa: E402
from bench.shapes_world import LANGUAGES, SHAPES, ShapeQuestion, ShapesWorld, build_world  # noqa: E402
from proxy.core.modes import MODES  # noqa: E402
from proxy.text.fold import fold  # noqa: E402

BUDGETS = (2000, 4000, 8000)
EXTRACTORS = ("perfect", "noisy")
COLUMNS = (*SHAPES, "all")
MISSES_AT = 4000   # the budget whose misses --misses prints (the target row), if it was asked


@dataclass
class FoldedCell(Cell):
    """bench/multihop_recall.Cell with names found whatever their case, width or Chinese script (GraphGate's
    fold), or in another of their ``spellings`` (the ones the noisy extractor may write)."""
    spellings: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def missing(self, question: Question, context: str) -> list[str]:
        folded = fold(context)
        return [name for name in question.gold
                if not any(holds(folded, fold(spelt)) for spelt in (name, *self.spellings.get(name, ())))]


def spellings(world: ShapesWorld) -> dict[str, tuple[str, ...]]:
    """Every name's other spellings the noisy extractor may write (bench/shapes_oracle.Noise)."""
    return {name: tuple(Noise.variants(name, kind, world.language)) for name, kind in world.names.items()}


@dataclass
class ShapesTable:
    extractor: str
    embedder: str
    keywords: str
    language: str = "en"
    spellings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cells: dict[tuple[int, str], FoldedCell] = field(default_factory=dict)
    stale: dict[int, list[int]] = field(default_factory=dict)   # budget -> [stale value also shown, asked]
    tokens: dict[int, list[int]] = field(default_factory=dict)
    seconds: float = 0.0

    def cell(self, budget: int, column: str) -> FoldedCell:
        return self.cells.setdefault((budget, column), FoldedCell(spellings=self.spellings))

    def add(self, budget: int, question: ShapeQuestion, result: dict[str, Any]) -> None:
        context = result["context"]
        self.cell(budget, question.kind).add(question, context)
        self.cell(budget, "all").add(question, context)
        self.tokens.setdefault(budget, []).append(result["tokens"].get("total", 0))
        if question.stale:
            counts = self.stale.setdefault(budget, [0, 0])
            counts[0] += any(holds(context.casefold(), value.casefold()) for value in question.stale)
            counts[1] += 1

    def markdown(self) -> str:
        budgets = sorted(self.tokens)
        lines = [f"| shape | questions | {' | '.join(f'{b:,}' for b in budgets)} | names found @{budgets[-1]:,} |",
                 "|---|---:|" + "---:|" * (len(budgets) + 1)]
        for column in COLUMNS:
            cells = [self.cells.get((b, column)) for b in budgets]
            if not any(cells):
                continue
            last = cells[-1] or FoldedCell()
            name = f"**{column}**" if column == "all" else column
            lines.append(f"| {name} | {cells[0].asked if cells[0] else 0} | "
                         + " | ".join(f"{c.recall:.2f}" if c else "-" for c in cells)
                         + f" | {last.names_found / max(last.names, 1):.2f} |")
        if self.stale:
            lines.append("| updated: stale value also shown | | "
                         + " | ".join(f"{self.stale[b][0] / max(self.stale[b][1], 1):.2f}" if b in self.stale else "-"
                                      for b in budgets) + " | |")
        lines.append("| mean context tokens | | " + " | ".join(
            f"{sum(self.tokens[b]) / max(len(self.tokens[b]), 1):,.0f}" for b in budgets) + " | |")
        return "\n".join(lines)

    def print_misses(self, count: int, budget: int) -> None:
        for column in COLUMNS[:-1] if count else ():
            for question, missing in self.cell(budget, column).missed[:count]:
                print(f"- missed at {budget:,} ({column}): {question} lacks {', '.join(missing)}")


def body(question: ShapeQuestion, mode: str, budget: int, keywords: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """bench/multihop_recall's query body, with a follow-up's earlier turns as /rag/query's ``history``."""
    asked = query_body(question, mode, budget, keywords, knobs)
    if question.history:
        asked["history"] = [{"role": role, "content": content} for role, content in question.history]
    return asked


async def ask(client: httpx.AsyncClient, world: ShapesWorld, table: ShapesTable, args: argparse.Namespace,
              knobs: dict[str, Any]) -> None:
    started = time.perf_counter()
    for budget in args.budgets:
        for question in world.questions:
            reply = await client.post("/rag/query", json=body(question, args.mode, budget, table.keywords, knobs))
            reply.raise_for_status()
            table.add(budget, question, reply.json())
    table.seconds = time.perf_counter() - started


def store_name(world: ShapesWorld, extractor: str, embedder: str, noise: Noise | None) -> str:
    """A store's directory under --store: what was ingested decides it (the same world, the same noise)."""
    digest = hashlib.sha256(json.dumps([world.documents, noise and [noise.seed, noise.variant_share,
                                                                     noise.drop_share]]).encode())
    return f"{world.language}-{extractor}-{embedder}-{len(world.documents)}-{digest.hexdigest()[:10]}"


async def run_store(world: ShapesWorld, extractor: str, embedder: str, args: argparse.Namespace,
                    knobs: dict[str, Any]) -> tuple[dict[str, Any], list[ShapesTable]]:
    """One store of the world (this extractor, this embedder), every question asked per keywords setting."""
    noise = Noise(args.noise_seed) if extractor == "noisy" else None
    fake = upstream(embedder)
    fake.structured = ShapesExtractor(world, noise)
    name = store_name(world, extractor, embedder, noise)
    data_dir = args.store / name if args.store else Path(tempfile.mkdtemp(prefix="gg-shapes-"))
    tables = []
    async with gateway(fake, data_dir) as (app, client):
        stats, how = await ingest(app, client, world.documents, data_dir)
        entities, true = stats.get("entities") or 0, world.true_entities
        print(f"\n## {world.language}: {extractor} extraction, embedder {embedder}: {how}: {stats.get('chunks')} "
              f"chunks, "
              f"{stats.get('relations')} relations, {entities} entities against the world's {true} "
              f"({(entities - true) / true:+.1%}; {len(world.aliases)} aliases)", flush=True)
        for keywords in args.keywords:
            table = ShapesTable(extractor, embedder, keywords, world.language, spellings(world))
            await ask(client, world, table, args, knobs)
            print(f"\n### {world.language}: {extractor} extraction, {embedder}, keywords {keywords}, {args.mode} mode "
                  f"({table.seconds:.0f} s of queries)\n", flush=True)
            print(table.markdown(), flush=True)
            table.print_misses(args.misses, MISSES_AT if MISSES_AT in args.budgets else args.budgets[0])
            tables.append(table)
    store = {"language": world.language, "extractor": extractor, "embedder": embedder, "chunks": stats.get("chunks"),
             "entities": entities, "relations": stats.get("relations"), "true_entities": true,
             "aliases": len(world.aliases)}
    return store, tables


def summary(tables: list[ShapesTable], budget: int) -> str:
    """Every table's recall per shape at one budget, side by side."""
    if not tables or not tables[0].cells.get((budget, "all")):
        return ""
    heads = [f"{t.language}: {t.extractor}, {t.embedder}, kw {t.keywords}" for t in tables]
    lines = [f"| shape @{budget:,} | {' | '.join(heads)} |", "|---|" + "---:|" * len(tables)]
    for column in COLUMNS:
        cells = [t.cells.get((budget, column)) for t in tables]
        if any(cells):
            name = f"**{column}**" if column == "all" else column
            lines.append(f"| {name} | " + " | ".join(f"{c.recall:.2f}" if c else "-" for c in cells) + " |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    knobs = dict(parse_knob(item) for item in args.set)
    if knobs:
        print(f"knobs on every query: {knobs}")
    stores: list[dict[str, Any]] = []
    tables: list[ShapesTable] = []
    counts: dict[str, dict[str, int]] = {}
    for language in dict.fromkeys(args.language):
        world = build_world(args.docs, seed=args.seed, questions=args.questions, language=language)
        counts[language] = await run_language(world, args, knobs, stores, tables)
    if args.json:
        rows = [{"language": t.language, "extractor": t.extractor, "embedder": t.embedder, "keywords": t.keywords,
                 "budget": b, "column": c, "recall": cell.recall, "asked": cell.asked, "names": cell.names,
                 "names_found": cell.names_found, "missed": cell.missed}
                for t in tables for (b, c), cell in sorted(t.cells.items())]
        stale = [{"language": t.language, "extractor": t.extractor, "embedder": t.embedder, "keywords": t.keywords,
                  "budget": b, "stale_shown": shown, "asked": asked}
                 for t in tables for b, (shown, asked) in sorted(t.stale.items())]
        tokens = [{"language": t.language, "extractor": t.extractor, "embedder": t.embedder, "keywords": t.keywords,
                   "budget": b, "mean": sum(v) / max(len(v), 1)} for t in tables for b, v in sorted(t.tokens.items())]
        args.json.write_text(json.dumps({"docs": args.docs, "seed": args.seed, "mode": args.mode, "knobs": knobs,
                                         "questions": counts, "stores": stores, "rows": rows, "stale": stale,
                                         "tokens": tokens}, indent=1, ensure_ascii=False))


async def run_language(world: ShapesWorld, args: argparse.Namespace, knobs: dict[str, Any],
                       stores: list[dict[str, Any]], tables: list[ShapesTable]) -> dict[str, int]:
    """Every store of one language's world; its stores and tables appended to ``stores`` and ``tables``."""
    counts = {shape: sum(q.kind == shape for q in world.questions) for shape in SHAPES}
    print(f"\n# {world.language}: {len(world.documents)} documents, {world.true_entities} entities "
          f"({len(world.aliases)} with an alias too), {sum(len(s.relations) for s in world.statements)} stated "
          f"relations, {len(world.hubs)} hubs; "
          f"questions: {counts}", flush=True)
    mine = []
    for extractor in args.extractor:
        for embedder in args.embedders:
            store, asked = await run_store(world, extractor, embedder, args, knobs)
            stores.append(store)
            mine += asked
    tables += mine
    at = MISSES_AT if MISSES_AT in args.budgets else args.budgets[0]
    if len(mine) > 1:
        print(f"\n## {world.language}: summary at {at:,} tokens\n\n{summary(mine, at)}", flush=True)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=250, help="documents in the world (a few more: see the world)")
    parser.add_argument("--seed", type=int, default=32, help="the world's seed")
    parser.add_argument("--questions", type=int, default=40, help="questions per shape, where the world has them")
    parser.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="context budgets (tokens)")
    parser.add_argument("--extractor", nargs="+", choices=EXTRACTORS, default=list(EXTRACTORS))
    parser.add_argument("--noise-seed", type=int, default=32, help="the noisy extractor's seed")
    parser.add_argument("--language", nargs="+", choices=LANGUAGES, default=["en"],
                        help="the world's language (bench/shapes_zh.py for zh); each its own stores")
    parser.add_argument("--embedders", nargs="+", choices=EMBEDDERS, default=["hash", "minilm"],
                        help="minilm is English only: for zh, hash, bigram or multilingual")
    parser.add_argument("--keywords", nargs="+", choices=("oracle", "off"), default=["oracle", "off"])
    parser.add_argument("--mode", choices=MODES, default="mix", help="the retrieval mode every question is asked in")
    parser.add_argument("--set", nargs="*", default=[], metavar="KNOB=VALUE", help="per-query knobs for every question")
    parser.add_argument("--misses", type=int, default=0,
                        help=f"print N missed questions per shape at {MISSES_AT:,} tokens, with the names they lacked")
    parser.add_argument("--store", type=Path, help="keep the ingested stores here and reuse them on the next run")
    parser.add_argument("--json", type=Path, help="also write every cell to this file")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
