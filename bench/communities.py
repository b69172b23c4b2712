"""The cost of community summaries (proxy/knowledge/communities.py): on the multi-hop bench's world
(bench/multihop_world.py, oracle extraction, the fake upstream's hashing embedder), the summary
job's calls and its own seconds per 1,000 chunks, the partition's time, and what a later upload
of a tenth more documents costs (only the communities it changed are summarised again). The fake
answers summary calls at once, so the seconds are GraphGate's own (partition, reads, embeddings,
commits); a real model adds its time per call. Then Leiden alone on synthetic graphs skewed like a
knowledge graph (bench/expansion.py's) of 100k and 1M entities.

It also reports how often the community channel's best five summaries name every gold answer of
the world's list questions ("which products does Y develop?"), searched with the question itself
(the channel's recall; the context's use of it is the retriever's).

    python bench/communities.py [--docs 500] [--sizes 100000 1000000]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.expansion import synthetic  # noqa: E402
from bench.multihop_oracle import OracleExtractor  # noqa: E402
from bench.multihop_world import World, build_world  # noqa: E402
from proxy.app import Settings, create_app  # noqa: E402
from proxy.core.limiter import Priority  # noqa: E402
from proxy.knowledge.communities import MAX_MEMBERS, MIN_MEMBERS  # noqa: E402
from proxy.knowledge.service import Knowledge  # noqa: E402
from proxy.retrieval.channels.communities import CommunityChannel  # noqa: E402
from proxy.retrieval.params import QueryParams  # noqa: E402
from proxy.retrieval.stages import Question  # noqa: E402
from proxy.store.communities_igraph import leiden_communities  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402

ENTITY_LINE = re.compile(r"^- (.+?) \(", re.M)
RELATION_LINE = re.compile(r"^- .+? -- .+?: (.*)$", re.M)


class Summariser(OracleExtractor):
    """The oracle model, also answering community calls as an ideal model would: a title, and a
    summary that restates the relations it was given and names every member."""

    calls = 0

    def __call__(self, request: dict[str, Any]) -> str:
        if "title" in ((request.get("format") or {}).get("properties") or {}):
            Summariser.calls += 1
            user = request["messages"][-1]["content"]
            names = ENTITY_LINE.findall(user)
            facts = " ".join(RELATION_LINE.findall(user))
            return json.dumps({"title": f"{names[0]} and related", "summary": f"{', '.join(names)}. {facts}"})
        return super().__call__(request)


async def settled(kb: Knowledge) -> None:
    """The documents are in and the summary job has caught up with them."""
    await kb.pipeline.wait_idle()
    while kb.pipeline.busy or not kb.communities.up_to_date or kb.communities.status.pending:
        await kb.communities.completed.wait()


async def channel_recall(kb: Knowledge, world: World) -> tuple[float, int]:
    """Share of list questions whose every gold name is in the channel's best five summaries."""
    asked = hits = 0
    channel = CommunityChannel()
    params = QueryParams.from_settings(Settings(), mode="global", communities="on")
    for question in (q for q in world.questions if q.kind == "list"):
        vector = (await kb.models.embed([question.text], priority=Priority.CHAT))[0]
        found = await anyio.to_thread.run_sync(channel.search, kb.store,
                                               Question(question.text, params, {"query": vector, "high": vector}))
        text = "\n".join(c.summary for c in found.communities)
        asked += 1
        hits += all(name in text for name in question.gold)
    return (hits / asked if asked else 0.0), asked


async def ingest_cost(docs: int) -> None:
    world = build_world(docs)
    first, later = world.documents[:int(len(world.documents) / 1.1)], world.documents[int(len(world.documents) / 1.1):]
    fake = FakeOllama()
    fake.structured = Summariser(world)
    data_dir = Path(tempfile.mkdtemp(prefix="gg-communities-"))
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_GLEANING": "0",
                                      "GRAPHGATE_COMMUNITY_SUMMARIES": "true"})
    app = create_app(settings, upstream_transport=fake.transport())
    async with app.router.lifespan_context(app):
        kb: Knowledge = app.state.gateway.knowledge
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=None) as client:
            for label, batch in (("first", first), ("a tenth more", later)):
                calls, seconds, runs = Summariser.calls, kb.communities.status.total_seconds, kb.communities.status.runs
                for name, text in batch:
                    (await client.post("/rag/documents", json={"name": name, "text": text})).raise_for_status()
                await settled(kb)
                stats = (await client.get("/rag/stats")).json()
                job = stats["communities"]["job"]
                chunks = stats["chunks"]
                made, spent = Summariser.calls - calls, job["total_seconds"] - seconds
                print(f"\n{label}: {len(batch)} documents; now {chunks} chunks, {stats['entities']} entities, "
                      f"{stats['relations']} relations, {stats['communities']['count']} communities")
                print(f"  summary calls {made}, job seconds {spent:.2f} over {job['runs'] - runs} runs "
                      f"(last partition {job['partition_seconds']:.3f} s)")
                if label == "first":
                    print(f"  per 1,000 chunks: {1000 * made / chunks:.0f} calls, {1000 * spent / chunks:.2f} s")
            recall, asked = await channel_recall(kb, world)
            print(f"\nlist questions whose gold names are all in the channel's best 5 summaries: "
                  f"{recall:.2f} of {asked}")


def leiden_time(sizes: list[int]) -> None:
    print("\nLeiden alone (modularity, communities over 40 split again), skewed synthetic graphs:")
    for size in sizes:
        graph = synthetic(size, np.random.default_rng(18))
        started = time.perf_counter()
        copy = graph.copy()
        copied = time.perf_counter() - started
        names, ends, weights = copy.snapshot()
        communities = leiden_communities(names, ends, weights, min_size=MIN_MEMBERS, max_size=MAX_MEMBERS)
        total = time.perf_counter() - started
        print(f"  {size:>9,} entities, {len(ends):>9,} edges: {total:6.1f} s ({copied:.2f} s copying under the lock), "
              f"{len(communities):,} communities of >= {MIN_MEMBERS}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    args = parser.parse_args()
    anyio.run(ingest_cost, args.docs)
    leiden_time(args.sizes)


if __name__ == "__main__":
    main()
