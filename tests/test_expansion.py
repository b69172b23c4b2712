"""Multi-hop expansion by personalised PageRank (issue 18, item 3: the ``expansion`` knob) and a
hub's relations ranked by the question (item 4: the ``relation_ranking`` knob), both off by
default. The graph engine's two reads on their own, then the channels through /rag/query over a
small corpus the scripted model of tests/extractor.py extracts. Real engines throughout."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from proxy.core.modes import Mode
from proxy.core.settings import Settings
from proxy.retrieval.channels import channels_for
from proxy.retrieval.params import QueryParams
from proxy.retrieval.select import keyword_match, word_stems
from proxy.store.graph_igraph import EntityGraph
from tests.conftest import gateway_client
from tests.fake_ollama import FakeOllama
from tests.hub_corpus import ENTITY_TYPES, NOVA, PRODUCTS, SUPPLIERS, ZETA, KindedFacts
from tests.rag_helpers import CLASSIC, settle, upload
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)


# --- the graph engine's reads ---

def graph_of(edges: list[tuple[str, str]]) -> EntityGraph:
    names = list(dict.fromkeys(key for pair in edges for key in pair))
    index = {key: i for i, key in enumerate(names)}
    graph = EntityGraph()
    graph.load(names, np.asarray([(index[a], index[b]) for a, b in edges], dtype=np.int64), [1.0] * len(edges))
    return graph


def test_the_neighbourhood_stops_at_its_hops_and_its_cap() -> None:
    path = graph_of([("a", "b"), ("b", "c"), ("c", "d")])
    assert sorted(path.neighbourhood_edges(["a"], 2, 100)) == [("a", "b"), ("b", "c")]
    assert path.neighbourhood_edges(["a"], 1, 100) == [("a", "b")]
    assert path.neighbourhood_edges(["nobody"], 2, 100) == []
    star = graph_of([("hub", f"leaf{i}") for i in range(50)] + [("leaf7", "far")])
    edges = star.neighbourhood_edges(["hub"], 2, 10)
    assert len({key for pair in edges for key in pair}) == 10     # the hub and nine leaves, no more
    assert all("hub" in pair for pair in edges)


def test_a_dense_neighbourhood_keeps_the_edges_nearest_the_seed_up_to_the_edge_cap() -> None:
    """The seed's 30 neighbours all know one another (435 edges among them): with room for 20 edges,
    they are 20 of the seed's own; with room for 40, all 30 of its own and 10 among its neighbours;
    with room for all, the same edges as without a cap."""
    ring = [f"n{i:02d}" for i in range(30)]
    dense = graph_of([("seed", n) for n in ring] + [(a, b) for i, a in enumerate(ring) for b in ring[i + 1:]])
    assert all("seed" in pair for pair in dense.neighbourhood_edges(["seed"], 2, 100, 20))
    forty = dense.neighbourhood_edges(["seed"], 2, 100, 40)
    assert len(forty) == 40 and sum("seed" in pair for pair in forty) == 30
    every = dense.neighbourhood_edges(["seed"], 2, 100)
    assert len(every) == 465 and sorted(dense.neighbourhood_edges(["seed"], 2, 100, 1000)) == sorted(every)
    assert len(set(map(frozenset, every))) == 465   # no edge twice


def test_the_walk_follows_the_edges_weighted_by_the_question() -> None:
    # seed -> bridge -> answer, beside a decoy the bridge also reaches
    graph = graph_of([("seed", "bridge"), ("bridge", "answer"), ("bridge", "decoy")])
    edges = graph.neighbourhood_edges(["seed"], 2, 100)
    weight = {("seed", "bridge"): 1.0, ("bridge", "answer"): 1.0, ("bridge", "decoy"): 0.05}
    scores = graph.personalized_pagerank({"seed": 1.0}, edges, [weight[pair] for pair in edges], 0.5)
    assert sorted(scores, key=lambda key: -scores[key]) == ["seed", "bridge", "answer", "decoy"]
    even = graph.personalized_pagerank({"seed": 1.0}, edges, [1.0] * len(edges), 0.5)
    assert even["answer"] == pytest.approx(even["decoy"])       # unweighted, nothing tells them apart
    assert graph.personalized_pagerank({}, edges, [1.0] * len(edges), 0.5) == {}


def test_question_words_match_relation_keywords_by_their_stem() -> None:
    stems = word_stems("Where is the company that acquired Nova Works headquartered?")
    assert keyword_match(stems, ["headquarters", "location"]) == 0.5
    assert keyword_match(stems, ["acquisition", "acquired"]) == 1.0
    assert keyword_match(stems, ["supplier", "supply chain"]) == 0.0
    assert keyword_match(stems, []) == 0.0


def test_the_expansion_and_the_chain_walk_run_only_when_the_knob_says_so() -> None:
    classic = QueryParams.from_settings(Settings().replace(**CLASSIC))
    on = QueryParams.from_settings(Settings().replace(**CLASSIC), expansion="ppr")
    assert [c.name for c in channels_for(Mode.LOCAL, on)] == ["expansion", "entities"]
    assert [c.name for c in channels_for(Mode.MIX, on)] == ["expansion", "entities", "relations", "chunks"]
    assert [c.name for c in channels_for(Mode.GLOBAL, on)] == ["relations"]
    assert all("expansion" not in [c.name for c in channels_for(mode, classic)] for mode in Mode)
    chains = QueryParams.from_settings(Settings().replace(**CLASSIC), expansion="chains")
    assert [c.name for c in channels_for(Mode.LOCAL, chains)] == ["chains", "entities"]
    assert [c.name for c in channels_for(Mode.MIX, chains)] == ["chains", "entities", "relations", "chunks"]
    assert all("chains" not in [c.name for c in channels_for(mode, on)] for mode in Mode)


# --- through /rag/query ---

@pytest.fixture
def kinded(fake: FakeOllama) -> KindedFacts:
    fake.structured = KindedFacts(ENTITY_TYPES)
    return fake.structured


async def ingest(client: httpx.AsyncClient) -> None:
    for name, text in (("nova.txt", NOVA), ("zeta.txt", ZETA)):
        assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"


async def query(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/rag/query", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    result.pop("timings")
    return result


def other_ends(result: dict[str, Any], entity: str, first: int | None = None) -> set[str]:
    """The entities ``result``'s relations (its ``first`` ones) join ``entity`` to (a pair is stored
    in name order)."""
    return {r["source"] if r["target"] == entity else r["target"] for r in result["relations"][:first]}


@on_both_backends
async def test_expansion_brings_the_bridge_and_its_fact_to_a_two_hop_question(
        settings: Settings, fake: FakeOllama, kinded: KindedFacts) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        # only the named entity seeds (no vector match counts), a few entities: the walk must choose
        body = {"query": "Where is the company that acquired Nova Works headquartered?", "mode": "local",
                "keywords": "off", "cosine_threshold": 1.0, "linking": "on", "top_k": 3}
        without = await query(client, **body)
        assert "Zeta Labs" in without["context"] and "Lisbon" not in without["context"]
        expanded = await query(client, **body, expansion="ppr")
        assert [e["name"] for e in expanded["entities"]][:3] == ["Nova Works", "Zeta Labs", "Lisbon"]
        assert {"Lisbon", "Zeta Labs"} in [{r["source"], r["target"]} for r in expanded["relations"]]
        assert "Zeta Labs is headquartered in Lisbon." in expanded["context"]
        # with keywords=off and linking off, the expansion still seeds from the names the question holds
        alone = await query(client, **{**body, "linking": "off"}, expansion="ppr")
        assert "Lisbon" in alone["context"]


@on_both_backends
async def test_the_chain_walk_follows_the_acquirer_to_its_head_office(
        settings: Settings, fake: FakeOllama, kinded: KindedFacts) -> None:
    """``expansion=chains`` (the light path's): no rings and no PageRank, but the chain from the named
    entity through the bridge: Nova Works' edges judged by the question (the acquisition), Zeta Labs'
    fifteen by what is left of it (its head office, not its products or suppliers)."""
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        body = {"query": "Where is the company that acquired Nova Works headquartered?", "mode": "local",
                "keywords": "off", "cosine_threshold": 1.0, "linking": "on", "top_k": 3}
        walked = await query(client, **body, expansion="chains")
        assert walked["channels"]["chains"]["relations"] > 0 and "expansion" not in walked["channels"]
        pairs = [{r["source"], r["target"]} for r in walked["relations"]]
        assert {"Nova Works", "Zeta Labs"} in pairs and {"Lisbon", "Zeta Labs"} in pairs
        # the hub's other edges were judged and left: none of its products or suppliers came along
        assert not [pair for pair in pairs if "Zeta Labs" in pair and pair & {*PRODUCTS, *SUPPLIERS}]
        assert "Zeta Labs is headquartered in Lisbon." in walked["context"]
        assert {"Lisbon", "Zeta Labs", "Nova Works"} <= {e["name"] for e in walked["entities"]}
        # the light path walks the chains in place of the PageRank expansion (an expansion turned off stays off)
        light = await query(client, **body, expansion="ppr", effort="light")
        assert "chains" in light["channels"] and "expansion" not in light["channels"]
        assert "Zeta Labs is headquartered in Lisbon." in light["context"]


async def test_the_chain_walk_goes_on_along_a_relation_the_question_does_not_name(
        settings: Settings, fake: FakeOllama, kinded: KindedFacts) -> None:
    """"The maker of Quillon" meets none of the words of Quillon's one relation (Zeta Labs develops
    it: product, develops), but a product's only relation is the way on, whatever the question calls
    it; the maker's head office is then the relation its words ask for."""
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        body = {"query": "Where is the maker of Quillon headquartered?", "mode": "local", "keywords": "off",
                "cosine_threshold": 1.0, "linking": "on", "top_k": 3}
        head_office = {"Lisbon", "Zeta Labs"}
        assert head_office not in [{r["source"], r["target"]} for r in (await query(client, **body))["relations"]]
        walked = await query(client, **body, expansion="chains")
        pairs = [{r["source"], r["target"]} for r in walked["relations"]]
        assert {"Quillon", "Zeta Labs"} in pairs and head_office in pairs


@on_both_backends
async def test_a_hubs_relations_of_the_asked_kind_come_first(
        settings: Settings, fake: FakeOllama, kinded: KindedFacts) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        body = {"query": "Which products does Zeta Labs develop?", "mode": "local", "keywords": "off",
                "cosine_threshold": 1.0, "linking": "on", "top_k": len(PRODUCTS)}
        central = await query(client, **body)
        # the first relations: the suppliers are better connected, the products are what is asked for
        assert other_ends(central, "Zeta Labs", len(PRODUCTS)) != set(PRODUCTS)
        ranked = await query(client, **body, relation_ranking="question")
        assert other_ends(ranked, "Zeta Labs", len(PRODUCTS)) == set(PRODUCTS)
        assert all(f"Zeta Labs develops {p}." in ranked["context"] for p in PRODUCTS)


async def test_both_knobs_off_by_default_change_nothing(
        settings: Settings, fake: FakeOllama, kinded: KindedFacts) -> None:
    async with gateway_client(settings.replace(**CLASSIC), fake) as client:
        await ingest(client)
        for mode in ("local", "global", "hybrid", "mix"):
            for linking in ("off", "on"):
                body = {"query": "Where is the company that acquired Nova Works headquartered?", "mode": mode,
                        "keywords": "off", "linking": linking}
                default = await query(client, **body)
                assert default == await query(client, **body, expansion="off", relation_ranking="degree")
        assert (await client.post("/rag/query", json={"query": "x", "expansion": "walk"})).status_code == 400
        assert (await client.post("/rag/query", json={"query": "x", "relation_ranking": "x"})).status_code == 400
