"""Context recall against the token budget: does the injected context still hold the answer when
the model's window is small?

A synthetic corpus of invented organisations and people, each document stating who directs one
organisation among other facts and distractors, is ingested through the fake upstream (which
extracts the known facts). For each organisation the question "Who is the director of <org>?"
has the director's name as its gold answer. Mix-mode retrieval runs at context budgets of 2k, 4k,
8k and 30k tokens (entity and relation budgets scaled as for a real window); recall is the share
of questions whose gold answer appears in the injected context.

    python bench/context_recall.py [--docs 300]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.app import Settings, create_app  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402

SYLLABLES = ["ka", "zor", "vel", "mir", "tan", "quo", "rex", "lun", "dra", "pel", "sif", "nox", "bri", "tal", "um"]
BUDGETS = (2000, 4000, 8000, 30000)


def invent(rng: random.Random, count: int, parts: int) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add(" ".join("".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize() for _ in range(parts)))
    return sorted(names)


def corpus(count: int) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    rng = random.Random(3)
    orgs = [f"{n} Institute" for n in invent(rng, count, 1)]
    people = invent(rng, count * 3, 2)
    directors = dict(zip(orgs, people[:count], strict=True))
    docs = []
    for i, org in enumerate(orgs):
        staff = rng.sample(people[count:], 4)
        other = rng.choice(orgs)
        sentences = [f"{directors[org]} is the director of {org}.",
                     f"{staff[0]} and {staff[1]} are researchers at {org}.",
                     f"{org} works closely with {other} on shared projects.",
                     f"{staff[2]} visited {other} last spring.",
                     f"{staff[3]} reviewed the annual report of {org}."]
        rng.shuffle(sentences)
        filler = " ".join(f"The committee discussed agenda item {rng.randint(1, 999)} at length." for _ in range(12))
        docs.append((f"org-{i:03d}.txt", " ".join(sentences) + " " + filler))
    return docs, directors, orgs + people


def extractor(names: list[str]):
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")

    def answer(request: dict) -> str:
        user = request["messages"][-1]["content"]
        props = (request.get("format") or {}).get("properties", {})
        if "low_level_keywords" in props:
            question = user.rpartition("Latest question:")[2]
            return json.dumps({"high_level_keywords": ["director"], "low_level_keywords": pattern.findall(question)})
        if "summary" in props:
            return json.dumps({"summary": user[-600:]})
        entities: dict[str, dict[str, str]] = {}
        relations: list[dict[str, Any]] = []
        for sentence in re.split(r"(?<=[.])\s+", user):
            found = list(dict.fromkeys(pattern.findall(sentence)))
            for name in found:
                kind = "Organization" if name.endswith("Institute") else "Person"
                entities.setdefault(name, {"name": name, "type": kind, "description": sentence})
            for a, b in itertools.pairwise(found):
                keyword = "director" if "director" in sentence else "associated"
                relations.append({"source": a, "target": b, "keywords": [keyword], "description": sentence,
                                  "weight": 5})
        return json.dumps({"entities": list(entities.values()), "relations": relations})

    return answer


async def run(doc_count: int) -> None:
    docs, directors, names = corpus(doc_count)
    fake = FakeOllama(embed_dim=256)
    fake.structured = extractor(names)
    fake.requests = type("Discard", (list,), {"append": lambda self, item: None})()
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": tempfile.mkdtemp(prefix="gg-recall-"),
                                      "GRAPHGATE_GLEANING": "0"})
    app = create_app(settings, upstream_transport=fake.transport())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=None) as client:
            for name, text in docs:
                await client.post("/rag/documents", json={"name": name, "text": text})
            await app.state.gateway.knowledge.documents.wait_idle()
            stats = (await client.get("/rag/stats")).json()
            print(f"{len(docs)} documents, {stats['chunks']} chunks, {stats['entities']} entities, "
                  f"{stats['relations']} relations; {len(directors)} questions")
            for budget in BUDGETS:
                hits, tokens = 0, 0
                for org, director in directors.items():
                    body = {"query": f"Who is the director of {org}?", "mode": "mix", "max_total_tokens": budget,
                            "max_entity_tokens": 6000 * budget // 30000, "max_relation_tokens": 8000 * budget // 30000}
                    result = (await client.post("/rag/query", json=body)).json()
                    hits += director in result["context"]
                    tokens += result["tokens"].get("total", 0)
                print(f"budget {budget:>6} tokens: recall {100 * hits / len(directors):5.1f}% "
                      f"(mean context {tokens / len(directors):,.0f} tokens)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=300)
    anyio.run(run, parser.parse_args().docs)


if __name__ == "__main__":
    main()
