"""The second hop of a 2-hop question, in English and in Chinese (issue 31: Chinese 2-hop at 4k was
0.87 with the character-bigram embedder). "Where is the company that acquired Nova Works
headquartered?": Nova Works' acquisition by Zeta Labs answers "acquired"; Zeta Labs is a hub that
acquired a dozen other companies, and its headquarters is the fact asked for. Two things used to lose
it: the expansion's walk weighed Zeta Labs' own acquisitions as high as the hop that reached it (so it
spread over every company Zeta Labs bought), and the evidence order put every fact of the named Nova
Works (its suppliers, which answer nothing) before the bridge's answer. Default retrieval (expansion
and the evidence layout), the scripted extractor, the real engines."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from proxy.core.settings import Settings
from proxy.retrieval.channels.expansion import Chains
from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import standing_out
from proxy.retrieval.stages import Question
from proxy.store.changes import pair_key
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class World:
    question: str
    named: str                        # the company the question names
    bridge: str                       # the company that acquired it
    answer: str                       # the bridge's headquarters
    suppliers: frozenset[str]         # the named company's suppliers: facts that answer nothing
    documents: dict[str, str]
    entities: dict[str, str]          # name -> type
    kinds: dict[str, list[str]]       # a word of a relation's sentence -> the keywords a model gives it


def english() -> World:
    suppliers = [f"{name} Metals" for name in ("Sable", "Corvid", "Brisk", "Ferro", "Gantry", "Holm", "Tarn", "Wick")]
    bought = [f"{name} Systems" for name in ("Alder", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Larch", "Maple",
                                             "Oak", "Pine", "Rowan", "Yew")]
    nova = " ".join(["Nova Works makes sensors.", *(f"{s} supplies components to Nova Works." for s in suppliers),
                     "Zeta Labs acquired Nova Works in 2019. Nova Works is headquartered in Ghent."])
    zeta = " ".join([*(f"Zeta Labs acquired {b}." for b in bought), "Zeta Labs is headquartered in Lisbon."])
    entities = {"Nova Works": "Organization", "Zeta Labs": "Organization", "Lisbon": "Location",
                "Ghent": "Location", **dict.fromkeys(suppliers + bought, "Organization")}
    kinds = {"supplies": ["supplier", "supply chain"], "acquired": ["acquisition", "acquired"],
             "headquartered": ["headquarters", "location"]}
    return World("Where is the company that acquired Nova Works headquartered?", "Nova Works", "Zeta Labs", "Lisbon",
                 frozenset(suppliers), {"nova.txt": nova, "zeta.txt": zeta}, entities, kinds)


def chinese() -> World:
    suppliers = [f"{name}金属" for name in ("萨布", "科维", "布里", "费罗", "甘特", "霍姆", "塔恩", "维克")]
    bought = [f"{name}系统" for name in ("奥德", "伯奇", "塞达", "艾尔", "菲尔", "黑泽", "拉奇", "梅普", "欧克",
                                         "派恩", "罗文", "尤伊")]
    nova = "".join(["诺瓦工坊生产传感器。", *(f"{s}为诺瓦工坊供应零部件。" for s in suppliers),
                    "泽塔实验室于2019年收购了诺瓦工坊。诺瓦工坊的总部位于根特。"])
    zeta = "".join([*(f"泽塔实验室收购了{b}。" for b in bought), "泽塔实验室的总部位于里斯本。"])
    entities = {"诺瓦工坊": "Organization", "泽塔实验室": "Organization", "里斯本": "Location", "根特": "Location",
                **dict.fromkeys(suppliers + bought, "Organization")}
    kinds = {"供应": ["供应商", "供应链"], "收购": ["收购", "被收购"], "总部": ["总部", "所在地"]}
    return World("收购诺瓦工坊的那家公司总部在哪里？", "诺瓦工坊", "泽塔实验室", "里斯本", frozenset(suppliers),
                 {"nova.txt": nova, "zeta.txt": zeta}, entities, kinds)


class KindedFacts(KnownFacts):
    """The scripted model, giving each relation its kind's keywords (as a real extractor does)."""
    def __init__(self, world: World) -> None:
        super().__init__(world.entities)
        self.kinds = world.kinds

    def extract(self, passage: str, *, gleaning: bool) -> dict[str, list[dict[str, Any]]]:
        found = super().extract(passage, gleaning=gleaning)
        for relation in found["relations"]:
            kind = next((k for k in self.kinds if k in relation["description"]), None)
            if kind is not None:
                relation["keywords"] = self.kinds[kind]
        return found


@contextlib.asynccontextmanager
async def ingested(settings: Settings, fake: FakeOllama, world: World) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with the world's documents processed, its model giving each relation its kind's keywords."""
    fake.structured = KindedFacts(world)
    async with gateway_client(settings, fake) as client:
        for name, text in world.documents.items():
            assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"
        yield client


async def facts_in_order(client: httpx.AsyncClient, world: World) -> list[set[str]]:
    """The endpoints of the facts the world's question gets (mix mode, no keyword call), in context order."""
    body = {"query": world.question, "mode": "mix", "keywords": "off"}
    result = (await client.post("/rag/query", json=body)).json()
    return [{r["source"], r["target"]} for r in result["relations"]]


async def walked_facts(client: httpx.AsyncClient, world: World, **knobs: object) -> tuple[list[set[str]], dict]:
    """The endpoints of the expansion channel's facts for the world's question (local mode, no keyword
    call, no vector above the threshold, room for four), and the whole answer."""
    body = {"query": world.question, "mode": "local", "keywords": "off", "cosine_threshold": 1.0, "top_k": 4,
            **knobs}
    result = (await client.post("/rag/query", json=body)).json()
    return [{r["source"], r["target"]} for r in result["relations"] if "expansion" in r["channels"]], result


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_the_bridges_answer_comes_before_the_named_entitys_other_facts(
        settings: Settings, fake: FakeOllama, language: str) -> None:
    world = english() if language == "en" else chinese()
    async with ingested(settings, fake, world) as client:
        # a budget that holds the instructions (their length is the language's) and a few of the facts
        # about the two companies: the order decides
        body = {"query": world.question, "mode": "mix", "keywords": "off"}
        whole = (await client.post("/rag/query", json=body)).json()
        assert world.answer in whole["context"]
        response = await client.post("/rag/query", json={**body, "max_total_tokens":
                                                         whole["tokens"]["instructions"] + 180})
        assert response.status_code == 200, response.text
        result = response.json()
        assert world.answer in result["context"], result["context"]
        relations = [{r["source"], r["target"]} for r in result["relations"]]
        # the hop, then the bridge's headquarters: before any of the named company's suppliers
        hop, answer = relations.index({world.named, world.bridge}), relations.index({world.bridge, world.answer})
        assert hop < answer
        assert all(answer < i for i, pair in enumerate(relations) if pair & world.suppliers), relations
        # the walk reached the answer through the bridge
        assert "expansion" in result["channels"] and result["channels"]["expansion"]["relations"] > 0


def test_the_walk_weighs_what_stands_out_of_an_embedders_cosines() -> None:
    """A neural embedder gives any question and any fact a cosine of 0.8-0.9: the expansion weighs the
    part above the neighbourhood's median, so a hub's edges do not all weigh alike."""
    anisotropic = np.asarray([0.84, 0.85, 0.86, 0.85, 0.95], dtype=np.float32)
    weights = standing_out(anisotropic)
    assert weights[:4].max() <= 0.1 and weights[4] == pytest.approx((0.95 - 0.85) / 0.15, abs=1e-5)
    spread = np.asarray([0.0, 0.1, 0.2, 0.6], dtype=np.float32)   # a lexical embedder's: the order stays
    assert list(np.argsort(standing_out(spread))[-1:]) == [3] and standing_out(spread)[0] == 0.0
    assert standing_out(np.asarray([1.0, 1.0], dtype=np.float32)).tolist() == [0.0, 0.0]   # no division by zero
    assert standing_out(np.asarray([], dtype=np.float32)).size == 0


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_the_walk_itself_reaches_the_bridges_answer_not_its_other_acquisitions(
        settings: Settings, fake: FakeOllama, language: str) -> None:
    """The expansion channel alone (no linked relations, no vectors above the threshold): with room
    for three relations, they are the hop, the bridge's headquarters and one more, not the bridge's
    acquisitions (they answer "acquired" too, but the hop reaching the bridge already did)."""
    world = english() if language == "en" else chinese()
    async with ingested(settings, fake, world) as client:
        walked, _ = await walked_facts(client, world, linking="off")
        assert {world.named, world.bridge} in walked and {world.bridge, world.answer} in walked, walked


def third_hop() -> World:
    """A 3-hop chain: the Quillon's maker (Nova Works) was acquired by Zeta Labs, whose chair is asked
    for; eight other companies' chairs answer "chairs" too, and Zeta Labs acquired eight others."""
    others = [f"{name} Systems" for name in ("Alder", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Larch", "Maple")]
    chairs = [f"{name} Vale" for name in ("Ada", "Bea", "Cal", "Dov", "Eli", "Fay", "Gus", "Hal")]
    nova = "Nova Works makes the Quillon. Zeta Labs acquired Nova Works in 2019."
    zeta = " ".join([*(f"Zeta Labs acquired {o}." for o in others), "Orla Dent chairs Zeta Labs."])
    boards = " ".join(f"{person} chairs {company}." for person, company in zip(chairs, others, strict=True))
    entities = {"Nova Works": "Organization", "Zeta Labs": "Organization", "Quillon": "Artifact",
                "Orla Dent": "Person", **dict.fromkeys(others, "Organization"), **dict.fromkeys(chairs, "Person")}
    kinds = {"makes": ["maker", "product"], "acquired": ["acquisition", "acquired"], "chairs": ["chair", "board"]}
    return World("Who chairs the company that acquired the maker of the Quillon?", "Quillon", "Zeta Labs",
                 "Orla Dent", frozenset(chairs), {"nova.txt": nova, "zeta.txt": zeta, "boards.txt": boards},
                 entities, kinds)


async def test_the_third_hop_of_a_chain_comes_before_the_same_kind_of_fact_elsewhere(
        settings: Settings, fake: FakeOllama) -> None:
    """The chain's third fact (the acquirer's chair) is judged by what the first two hops left
    ("chairs"), with the anchor the chain carries: it comes before the other companies' chairs,
    which answer "chairs" as well but hang off no hop of the chain."""
    world = third_hop()
    async with ingested(settings, fake, world) as client:
        relations = await facts_in_order(client, world)
        answer = relations.index({world.bridge, world.answer})
        assert all(answer < i for i, pair in enumerate(relations) if pair & world.suppliers), relations


async def test_the_walk_follows_a_chain_past_its_rings_to_the_third_fact(settings: Settings, fake: FakeOllama) -> None:
    """The expansion alone: the walk's rings end at the acquirer (two hops from the Quillon); the
    chain is followed one hop further, where the acquirer's edge that answers what is left
    ("chairs") is its chair, not one of its acquisitions."""
    world = third_hop()
    async with ingested(settings, fake, world) as client:
        walked, result = await walked_facts(client, world)
        assert {world.bridge, world.answer} in walked, walked
        assert world.answer in {e["name"] for e in result["entities"]}


def taken_over() -> World:
    """The third-hop world asked with a phrasal verb the documents write as one word: "took over"
    against the keyword and description "takeover". The maker has a chair of its own, the fact a
    chain through the wrong edge would bring."""
    world = third_hop()
    nova = "Nova Works makes the Quillon. Zeta Labs completed its takeover of Nova Works. Ivo Crane chairs Nova Works."
    kinds = {**world.kinds, "takeover": ["acquisition", "takeover"]}
    kinds.pop("acquired")
    return dataclasses.replace(world, question="Who chairs the company that took over the maker of the Quillon?",
                               documents={**world.documents, "nova.txt": nova}, kinds=kinds,
                               entities={**world.entities, "Ivo Crane": "Person"})


async def test_a_hop_worded_by_an_irregular_phrasal_verb_is_followed(settings: Settings, fake: FakeOllama) -> None:
    """"took over" is "take" + "over", the keyword "takeover" (proxy/text/word_forms.py): the takeover
    answers the middle hop, so the acquirer's chair comes before the maker's own chair (which
    answers "chairs" through the hop that only answers "maker")."""
    world = taken_over()
    async with ingested(settings, fake, world) as client:
        relations = await facts_in_order(client, world)
        assert relations.index({world.bridge, world.answer}) < relations.index({"Nova Works", "Ivo Crane"}), relations


def harvester() -> World:
    """A Chinese 3-hop chain whose product's name starts with the character the question's middle
    relation word starts with: 收割机 (harvester) and 收购 (acquired). The maker and the acquirer
    each have a head office."""
    others = [f"{name}系统" for name in ("奥德", "伯奇", "塞达", "艾尔", "菲尔", "黑泽", "拉奇", "梅普")]
    nova = "诺瓦工坊生产奎隆收割机。泽塔实验室于2019年收购了诺瓦工坊。诺瓦工坊的总部位于根特。"
    zeta = "".join([*(f"泽塔实验室收购了{o}。" for o in others), "泽塔实验室的总部位于里斯本。"])
    entities = {"诺瓦工坊": "Organization", "泽塔实验室": "Organization", "奎隆收割机": "Artifact",
                "里斯本": "Location", "根特": "Location", **dict.fromkeys(others, "Organization")}
    kinds = {"生产": ["制造商", "产品"], "收购": ["收购", "被收购"], "总部": ["总部", "所在地"]}
    return World("收购了奎隆收割机制造商的公司总部在哪里？", "奎隆收割机", "泽塔实验室", "里斯本", frozenset(),
                 {"nova.txt": nova, "zeta.txt": zeta}, entities, kinds)


async def test_a_names_characters_answer_no_relation_word_of_the_chain(settings: Settings, fake: FakeOllama) -> None:
    """"诺瓦工坊生产奎隆收割机" (the maker makes the harvester) does not answer 收购 (acquired) by
    the 收 of the harvester's name: the maker's acquisition is still asked for, so the acquirer's
    head office comes before the maker's own."""
    world = harvester()
    async with ingested(settings, fake, world) as client:
        relations = await facts_in_order(client, world)
        assert relations.index({world.bridge, world.answer}) < relations.index({"诺瓦工坊", "根特"}), relations


def chaired(language: str) -> World:
    """A 3-hop chain from a person: Orla Dent chairs Nova Works, which Zeta Labs acquired; Zeta Labs'
    head office is asked for. Eight other companies' chairs answer "chairs" as the question's own
    first hop does."""
    if language == "en":
        others = [f"{name} Systems" for name in ("Alder", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Larch", "Maple")]
        chairs = [f"{name} Vale" for name in ("Ada", "Bea", "Cal", "Dov", "Eli", "Fay", "Gus", "Hal")]
        nova = "Orla Dent chairs Nova Works. Nova Works is headquartered in Ghent. Nova Works merged into Zeta Labs."
        zeta = "Zeta Labs is headquartered in Lisbon."
        boards = " ".join(f"{person} chairs {company}." for person, company in zip(chairs, others, strict=True))
        names = {"Nova Works": "Organization", "Zeta Labs": "Organization", "Orla Dent": "Person",
                 "Lisbon": "Location", "Ghent": "Location"}
        kinds = {"chairs": ["chair", "board"], "merged": ["acquisition", "merger"],
                 "headquartered": ["headquarters", "location"]}
        question = "Where is the head office of the company that acquired the firm chaired by Orla Dent?"
        named, bridge, answer = "Orla Dent", "Zeta Labs", "Lisbon"
    else:
        others = [f"{name}系统" for name in ("奥德", "伯奇", "塞达", "艾尔", "菲尔", "黑泽", "拉奇", "梅普")]
        chairs = [f"{name}·维尔" for name in ("艾达", "比娅", "卡尔", "多夫", "伊莱", "费伊", "格斯", "哈尔")]
        nova = "欧拉·登特担任诺瓦工坊董事会主席。诺瓦工坊的总部位于根特。诺瓦工坊于2007年并入泽塔实验室。"
        zeta = "泽塔实验室的总部位于里斯本。"
        boards = "".join(f"{person}担任{company}董事会主席。" for person, company in zip(chairs, others, strict=True))
        names = {"诺瓦工坊": "Organization", "泽塔实验室": "Organization", "欧拉·登特": "Person",
                 "里斯本": "Location", "根特": "Location"}
        kinds = {"董事会主席": ["董事会主席", "董事会"], "并入": ["收购", "并购"], "总部": ["总部", "所在地"]}
        question = "收购了由欧拉·登特担任董事会主席的公司的那家企业，总部设在哪个城市？"
        named, bridge, answer = "欧拉·登特", "泽塔实验室", "里斯本"
    entities = {**names, **dict.fromkeys(others, "Organization"), **dict.fromkeys(chairs, "Person")}
    return World(question, named, bridge, answer, frozenset(chairs),
                 {"nova.txt": nova, "zeta.txt": zeta, "boards.txt": boards}, entities, kinds)


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_facts_apart_from_the_chain_are_judged_by_what_the_named_entity_left(
        settings: Settings, fake: FakeOllama, language: str) -> None:
    """The named person's chair answers "chaired": the other companies' chairs answer nothing the
    question still asks, and come after the chain's acquisition and the acquirer's head office
    (they were judged by the whole question, and outranked the chain's later hops). No cosine
    threshold: the relations channel brings every fact, and the order decides."""
    world = chaired(language)
    async with ingested(settings, fake, world) as client:
        body = {"query": world.question, "mode": "mix", "keywords": "off", "cosine_threshold": 0.0}
        result = (await client.post("/rag/query", json=body)).json()
        relations = [{r["source"], r["target"]} for r in result["relations"]]
        answer = relations.index({world.bridge, world.answer})
        assert all(answer < i for i, pair in enumerate(relations) if pair & world.suppliers), relations


def made_otherwise() -> World:
    """The third-hop world with the first hop worded otherwise: the question says "maker", the
    product's only relation "comes from the workshops of" with the keywords "product, manufactures"."""
    world = third_hop()
    nova = "The Quillon comes from the workshops of Nova Works. Zeta Labs acquired Nova Works in 2019."
    # the acquirer's chair is the one fact of its kind whose keywords the question half matches
    zeta = world.documents["zeta.txt"].replace("Orla Dent chairs Zeta Labs.",
                                               "Orla Dent chairs the board of Zeta Labs.")
    kinds = {"workshops": ["product", "manufactures"], "acquired": ["acquisition", "acquired"],
             "board": ["chair", "board"], "chairs": ["chair"]}
    return dataclasses.replace(world, documents={**world.documents, "nova.txt": nova, "zeta.txt": zeta}, kinds=kinds)


async def test_a_named_entitys_only_relation_carries_the_chain_whatever_it_is_called(
        settings: Settings, fake: FakeOllama) -> None:
    """The Quillon has one relation: whatever the question calls it, the chain goes through it
    (``hop_confidence``: never less than its share of the entity's edges), so the acquirer's chair
    comes before the eight other companies' chairs, which answer "chairs" as well."""
    world = made_otherwise()
    async with ingested(settings, fake, world) as client:
        relations = await facts_in_order(client, world)
        answer = relations.index({world.bridge, world.answer})
        assert all(answer < i for i, pair in enumerate(relations) if pair & world.suppliers), relations


def test_an_entity_keeps_the_strongest_path_that_reaches_it() -> None:
    """Best-first, not ring by ring: a weak vector seed's neighbour X is reached in the first ring,
    but the named entity's chain reaches it a hop later with more strength, and X's onward edge is
    then judged by what that chain left (here: its edge to Y answers the rest, "chairs")."""
    key = pair_key
    facts: dict[str, tuple[tuple[str, ...], str, str, int]] = {
        key("named", "b"): (("maker",), "Named", "B", 1), key("weak", "x"): (("partner",), "Weak", "X", 2),
        key("b", "x"): (("acquisition",), "B", "X", 3), key("x", "y"): (("chair",), "X", "Y", 4)}
    relevance = {key("named", "b"): 1.0, key("weak", "x"): 1.0, key("b", "x"): 1.0, key("x", "y"): 1.0}
    asked: dict[str, str | None] = {}

    def judge(rest: str | None, group: list[str]) -> dict[str, float]:
        for pair in group:
            asked[pair] = rest
        return {pair: relevance[pair] for pair in group}

    question = Question("Who chairs the firm that acquired the maker of Named?", QueryParams(), {})
    chains = Chains(question, {"named": 1.0, "weak": 0.1})
    chains.judge(facts, judge)
    assert chains.strength["x"] == pytest.approx(1.0) and chains.depth["x"] == 2
    rest = asked[key("x", "y")]
    assert rest is not None and "maker" not in rest.split()
    assert chains.strength["y"] == pytest.approx(1.0)


def seen_from_elsewhere() -> World:
    """The third-hop world whose question names a partner of the acquirer too, one with a dozen
    partners: the acquirer's edges (its chair's among them) are in the walk's rings from that second
    seed, but the stronger path to the acquirer is the chain from the Quillon, which reaches it at
    the rings' edge."""
    world = third_hop()
    partners = [f"{name} Mills" for name in ("Arn", "Bly", "Cray", "Dune", "Eske", "Fenn", "Gorm", "Hale", "Isle",
                                              "Jura", "Kell")]
    pike = " ".join(f"Pike Forge signed a partnership with {p}." for p in [*partners, "Zeta Labs"])
    kinds = {**world.kinds, "partnership": ["partner", "cooperation"]}
    return dataclasses.replace(world, question="Who chairs the company that acquired the maker of the Quillon? "
                                               "I read about Pike Forge.",
                               documents={**world.documents, "pike.txt": pike}, kinds=kinds,
                               entities={**world.entities, "Pike Forge": "Organization",
                                         **dict.fromkeys(partners, "Organization")})


async def test_a_chains_next_fact_is_given_when_another_seed_brought_it_into_the_rings(
        settings: Settings, fake: FakeOllama) -> None:
    """The chain's end (the acquirer) is followed one hop further and its onward edge that answers
    what is left (its chair) is the chain's next fact, although the walk had that edge already
    (two hops from the second seed): before, only edges fetched in that hop counted, none were
    new, and the chair was left to the PageRank's few places."""
    world = seen_from_elsewhere()
    async with ingested(settings, fake, world) as client:
        walked, _ = await walked_facts(client, world)
        assert {world.bridge, world.answer} in walked, walked
