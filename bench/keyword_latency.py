"""What a slow keyword model costs a turn (issue 18, item 1): retrieval time with the keyword call
made (a model that answers in 500 ms), against ``keywords=off``, on the multi-hop world.

The fake upstream answers every structured call (the keyword extraction) after ``--delay`` seconds;
each question is asked once per column, so no keyword answer comes from the cache. Columns:

    off        keywords=off: no call
    default    the call made, waited for up to GRAPHGATE_KEYWORD_BUDGET (0.025 s) from the start of retrieval
    wait       the call made and waited for (keyword_budget=30: the behaviour before the budget)

Times are /rag/query's wall time in process (the gateway's retrieval and context; a chat turn adds
the same retrieval before it forwards). Recall is the share of questions whose gold names are all
in the 4k-token context (bench/multihop_recall.py's measure, MiniLM or hash embeddings).

    python bench/keyword_latency.py [--docs 200] [--delay 0.5] [--embedder hash|minilm] [--questions 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.multihop_recall import Forgetful, OracleExtractor, holds, upstream  # noqa: E402
from bench.multihop_world import build_world  # noqa: E402
from proxy.app import create_app  # noqa: E402
from proxy.core.settings import Settings  # noqa: E402

COLUMNS: dict[str, dict[str, Any]] = {"off": {"keywords": "off"}, "default": {}, "wait": {"keyword_budget": 30}}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    world = build_world(args.docs)
    fake = upstream(args.embedder)
    fake.structured = OracleExtractor(world)   # extraction and keywords answered from the world's facts
    fake.requests = Forgetful()
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": tempfile.mkdtemp(prefix="gg-kwlat-"),
                                      "GRAPHGATE_GLEANING": "0"})
    app = create_app(settings, upstream_transport=fake.transport())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=None) as client:
            for name, text in world.documents:
                (await client.post("/rag/documents", json={"name": name, "text": text})).raise_for_status()
            await app.state.gateway.knowledge.documents.wait_idle()
            fake.reply_delay = args.delay   # from now on every structured answer takes this long
            questions = world.questions[:args.questions]
            print(f"{len(world.documents)} documents; {len(questions)} questions; keyword model answers in "
                  f"{args.delay * 1000:.0f} ms; embedder {args.embedder}\n")
            print("| column | p50 ms | p95 ms | recall at 4k | keyword sources |")
            print("|---|---|---|---|---|")
            p50 = {}
            for column, knobs in COLUMNS.items():
                times: list[float] = []
                recalled = 0
                sources: dict[str, int] = {}
                for i, question in enumerate(questions):
                    # a per-column suffix: the same question in another column is not a cache hit
                    body = {"query": f"{question.text} ({column} {i})", "mode": "mix", "max_total_tokens": 4000,
                            "max_entity_tokens": 800, "max_relation_tokens": 1066, **knobs}
                    started = time.perf_counter()
                    reply = await client.post("/rag/query", json=body)
                    times.append((time.perf_counter() - started) * 1000)
                    reply.raise_for_status()
                    result = reply.json()
                    recalled += all(holds(result["context"], name) for name in question.gold)
                    source = (result.get("keywords") or {}).get("source", "none")
                    sources[source] = sources.get(source, 0) + 1
                p50[column] = statistics.median(times)
                print(f"| {column} | {p50[column]:.1f} | {percentile(times, 0.95):.1f} | "
                      f"{recalled / len(questions):.2f} | {sources} |", flush=True)
            print(f"\nadded over keywords=off, p50: default {p50['default'] - p50['off']:+.1f} ms, "
                  f"waiting {p50['wait'] - p50['off']:+.1f} ms")
            fake.reply_delay = 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds the keyword model takes")
    parser.add_argument("--embedder", choices=("hash", "minilm"), default="hash")
    parser.add_argument("--questions", type=int, default=60)
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
