"""A question that names no entity asks for the entities its words describe (issue 32: "which firms
are active in the aviation sector?" was 0.12-0.50 on the shapes bench). The described channel
(proxy/retrieval/channels/described.py) finds them by the question's words in the entities' names
and descriptions, through the BM25 index of entities alone, and the evidence layout lists them first.
English and Chinese; the scripted extractor, the real engines."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload

pytestmark = pytest.mark.anyio

AVIATION = ["Corvid Air", "Lark Aero", "Swift Wings", "Heron Jets"]
TREES = ("Alder", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Larch", "Maple")
SECTORS = {"textile": "Mills", "mining": "Mines", "printing": "Press", "banking": "Bank"}
OTHERS = [f"{tree} {kind}" for kind in SECTORS.values() for tree in TREES]
# the other companies share the question's generic words ("firms", "active", "sector"), the aviation
# ones only "aviation": a similarity to the whole question ranks the others first; a word's rarity in
# the store (BM25's) does not
ENGLISH = {
    "aviation.txt": " ".join([f"{AVIATION[0]} is one of the region's aviation companies.",
                              f"As an aviation business, {AVIATION[1]} depends on steady orders.",
                              f"{AVIATION[2]} builds aviation parts.", f"{AVIATION[3]} serves aviation customers."]),
    **{f"{sector}.txt": " ".join(f"{tree} {kind} is one of the firms active in the {sector} sector." for tree in TREES)
       for sector, kind in SECTORS.items()},
}
AVIATION_ZH = ["鸦航空", "云雀航宇", "雨燕飞翼", "苍鹭喷气"]
TREES_ZH = ("桤木", "桦木", "雪松", "榆木", "冷杉", "榛木", "落叶松", "枫木")
SECTORS_ZH = {"纺织": "纺织厂", "采矿": "矿业", "印刷": "印刷厂", "银行": "银行"}
OTHERS_ZH = [f"{tree}{kind}" for kind in SECTORS_ZH.values() for tree in TREES_ZH]
CHINESE = {
    "aviation.txt": "".join([f"{AVIATION_ZH[0]}是本地区的航空企业之一。",
                             f"作为航空企业，{AVIATION_ZH[1]}依靠稳定的订单。",
                             f"{AVIATION_ZH[2]}生产航空零件。", f"{AVIATION_ZH[3]}服务航空客户。"]),
    **{f"{sector}.txt": "".join(f"{tree}{kind}是活跃在{sector}行业的公司之一。" for tree in TREES_ZH)
       for sector, kind in SECTORS_ZH.items()},
}
WORLDS = {"en": ("Which firms are active in the aviation sector?", AVIATION, OTHERS, ENGLISH),
          "zh": ("哪些公司活跃在航空行业？", AVIATION_ZH, OTHERS_ZH, CHINESE)}


async def ingested(client: httpx.AsyncClient, documents: dict[str, str]) -> None:
    for name, text in documents.items():
        assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"


def store_of(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.gateway.knowledge.store  # type: ignore[attr-defined]


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_the_entities_a_question_describes_come_first(settings: Settings, fake: FakeOllama,
                                                           language: str) -> None:
    question, aviation, others, documents = WORLDS[language]
    fake.structured = KnownFacts(dict.fromkeys(aviation + others, "Organization"))
    async with gateway_client(settings, fake) as client:
        await ingested(client, documents)
        result = (await client.post("/rag/query", json={"query": question, "mode": "mix", "keywords": "off"})).json()
        names = [e["name"] for e in result["entities"]]
        assert set(names[:len(aviation)]) == set(aviation), names
        assert all("described" in e["channels"] for e in result["entities"][:len(aviation)])
        # off, the linking that says "nothing is named" is off too: the old order
        off = (await client.post("/rag/query", json={"query": question, "mode": "mix", "keywords": "off",
                                                      "linking": "off"})).json()
        assert set(e["name"] for e in off["entities"][:len(aviation)]) != set(aviation)


async def test_only_a_question_naming_nothing_builds_the_entities_keyword_index(settings: Settings,
                                                                                fake: FakeOllama) -> None:
    question, aviation, others, documents = WORLDS["en"]
    fake.structured = KnownFacts(dict.fromkeys(aviation + others, "Organization"))
    async with gateway_client(settings, fake) as client:
        await ingested(client, documents)
        store = store_of(client)
        named = (await client.post("/rag/query", json={"query": f"Which firms work with {OTHERS[0]}?",
                                                        "mode": "mix", "keywords": "off"})).json()
        assert "described" not in {c for e in named["entities"] for c in e["channels"]}
        assert [store.keyword_count(t) for t in ("chunks", "entities", "relations")] == [0, 0, 0]
        await client.post("/rag/query", json={"query": question, "mode": "mix", "keywords": "off"})
        assert store.keyword_count("entities") == len(aviation) + len(others)
        assert store.keyword_count("chunks") == 0 and store.keyword_count("relations") == 0
        # kept in step from then on: a company described later is found at once
        await ingested(client, {"late.txt": "Osprey Aviation is one of the region's aviation companies."})
        fake.structured.entities["Osprey Aviation"] = "Organization"
        await ingested(client, {"late2.txt": "Osprey Aviation builds aviation parts for export."})
        late = (await client.post("/rag/query", json={"query": question, "mode": "mix", "keywords": "off"})).json()
        assert "Osprey Aviation" in [e["name"] for e in late["entities"][:len(aviation) + 1]]


NOTES = ("{} repainted its hangars after a long winter of storms.", "{} moved its offices twice in ten years.",
         "{} builds aviation parts.")
# one document per note: an entity's description is its notes merged from every document
HANGARS = {f"note{i}.txt": " ".join(note.format(name) for name in AVIATION) for i, note in enumerate(NOTES)}


async def test_an_unnamed_entitys_line_gives_the_notes_the_question_asks_about(settings: Settings,
                                                                              fake: FakeOllama) -> None:
    """A line is cut at a few dozen tokens: notes the question does not ask about would crowd the
    other candidates out of the entity section (the shapes bench's "which firms are active in the
    aviation sector?" lost two of eight firms at 4k). A named entity's line keeps every note."""
    fake.structured = KnownFacts(dict.fromkeys(AVIATION, "Organization"))
    async with gateway_client(settings, fake) as client:
        await ingested(client, HANGARS)
        asked = (await client.post("/rag/query", json={"query": "Which firms make aviation parts?", "mode": "mix",
                                                        "keywords": "off"})).json()
        lines = {line.split(" (")[0][2:]: line for line in asked["context"].splitlines()
                 if line.startswith("- ") and "(Organization)" in line}
        assert set(lines) == set(AVIATION), asked["context"]
        for name, line in lines.items():
            assert f"{name} builds aviation parts." in line
            assert "hangars" not in line and "offices" not in line, line
        # one the question names: its other notes are what it may ask about
        named = (await client.post("/rag/query", json={"query": f"Tell me about {AVIATION[0]} and aviation.",
                                                        "mode": "mix", "keywords": "off"})).json()
        line = next(line for line in named["context"].splitlines() if line.startswith(f"- {AVIATION[0]} ("))
        assert "hangars" in line and "aviation parts" in line, line
        # notes that meet none of the question's words: the first ones, the entity's gist
        gist = (await client.post("/rag/query", json={"query": "Which firms repainted?", "mode": "mix",
                                                       "keywords": "off"})).json()
        line = next(line for line in gist["context"].splitlines() if line.startswith(f"- {AVIATION[1]} ("))
        assert "hangars" in line, line


FLEET = [f"{tree} {kind}" for tree in TREES for kind in ("Air", "Aero")]   # sixteen aviation firms
PARTNERS = {"fleet.txt": " ".join(f"{name} builds aviation parts." for name in FLEET),
            "partners.txt": " ".join(f"{a} and {b} signed a cooperation agreement."
                                     for a, b in zip(FLEET, FLEET[1:], strict=False))}


@pytest.mark.parametrize("budget", [650, 800])
async def test_a_question_naming_nothing_gets_its_entities_before_the_facts(settings: Settings, fake: FakeOllama,
                                                                            budget: int) -> None:
    """Its answer is the list of the entities it describes: their lines take the whole graph budget
    (the entities' and the facts') first. On the Chinese shapes world at 4k the entities' own section
    held eleven companies of other sectors (their descriptions share the question's frame, 活跃在…领域)
    and left out up to three of eight shipping firms, while the facts' room held unrelated facts."""
    fake.structured = KnownFacts(dict.fromkeys(FLEET, "Organization"))
    async with gateway_client(settings, fake) as client:
        await ingested(client, PARTNERS)
        result = (await client.post("/rag/query", json={"query": "Which firms build aviation parts?", "mode": "mix",
                                                         "keywords": "off", "max_total_tokens": budget})).json()
        graph = result["context"].split("## Document passages")[0]
        assert [name for name in FLEET if f"- {name} (Organization)" not in graph] == [], graph
        assert "signed a cooperation agreement" in graph, graph   # the facts have the room the lines leave
