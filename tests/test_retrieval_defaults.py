"""Retrieval with its defaults (issue 18): the entities a question names link without the model,
the expansion walks to the bridge, and the evidence layout spends a small budget on the facts that
answer: the asked-for kind of a hub's relations first, a next hop judged by what the first hop left
unanswered, every fact once, passages with what is left, sources still named."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.core.settings import Settings
from proxy.core.tokens import get_tokenizer
from tests.conftest import gateway_client
from tests.fake_ollama import FakeOllama
from tests.hub_corpus import ENTITY_TYPES, NOVA, PRODUCTS, SUPPLIERS, ZETA, KindedFacts
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio

LIST = "Which products does Zeta Labs develop?"
TWO_HOP = "Where is the company that acquired Nova Works headquartered?"


@pytest.fixture
async def hub(settings: Settings, fake: FakeOllama) -> Any:
    fake.structured = KindedFacts(ENTITY_TYPES)
    async with gateway_client(settings, fake) as client:
        for name, text in (("nova.txt", NOVA), ("zeta.txt", ZETA)):
            assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"
        yield client


def pairs(result: dict[str, Any]) -> list[set[str]]:
    return [{r["source"], r["target"]} for r in result["relations"]]


def facts_section(context: str) -> list[str]:
    section = context.split("## Facts (knowledge graph relations)\n")[1].split("\n\n")[0]
    return section.splitlines()


async def test_a_list_question_gets_the_named_hubs_asked_relations_first(hub: httpx.AsyncClient) -> None:
    result = await query(hub, query=LIST, mode="mix", keywords="off")
    # the six products lead (in any order among them), ahead of the hub's suppliers
    assert {frozenset(p) for p in pairs(result)[:len(PRODUCTS)]} == {frozenset({"Zeta Labs", p}) for p in PRODUCTS}
    assert result["entities"][0]["name"] == "Zeta Labs" and "linked" in result["entities"][0]["channels"]
    lines = facts_section(result["context"])
    assert set(lines[:len(PRODUCTS)]) == {f"- Zeta Labs develops {p}." for p in PRODUCTS}


async def test_every_fact_once_and_entities_without_what_the_facts_say(hub: httpx.AsyncClient) -> None:
    context = (await query(hub, query=LIST, mode="mix", keywords="off"))["context"]
    graph, passages = context.split("## Document passages")   # passages are quoted whole
    for product in PRODUCTS:
        assert graph.count(f"Zeta Labs develops {product}.") == 1   # the product's description says it too
        assert f"- {product} (Artifact)\n" in graph
    assert '"reference_id": 1' in passages and "## References\n[1] " in passages   # sources still named


async def test_a_small_budget_keeps_the_best_facts_and_fits(hub: httpx.AsyncClient) -> None:
    budget = 450
    result = await query(hub, query=LIST, mode="mix", keywords="off", max_total_tokens=budget,
                         max_relation_tokens=30, max_entity_tokens=40)
    lines = facts_section(result["context"])
    assert 1 <= len(lines) < len(PRODUCTS) and all(line.startswith("- Zeta Labs develops ") for line in lines)
    assert result["tokens"]["total"] <= budget
    assert get_tokenizer().count(result["context"]) <= budget


async def test_the_bridges_asked_fact_outranks_its_other_relations(hub: httpx.AsyncClient) -> None:
    result = await query(hub, query=TWO_HOP, mode="mix", keywords="off")
    found = pairs(result)
    assert found[0] == {"Nova Works", "Zeta Labs"}   # the hop the question names
    headquarters = found.index({"Zeta Labs", "Lisbon"})
    suppliers = [found.index({"Zeta Labs", s}) for s in SUPPLIERS if {"Zeta Labs", s} in found]
    assert all(headquarters < i for i in suppliers)
    assert "- Zeta Labs is headquartered in Lisbon." in facts_section(result["context"])


async def test_global_mode_uses_the_named_entity_too(hub: httpx.AsyncClient) -> None:
    # the themes alone ("products") cannot say whose: the name the question holds does
    result = await query(hub, query=LIST, mode="global", hl_keywords=["products", "develops"])
    assert {frozenset(p) for p in pairs(result)} >= {frozenset({"Zeta Labs", p}) for p in PRODUCTS}
    assert "linked" in result["channels"]


async def test_the_classic_layout_is_a_knob_away(hub: httpx.AsyncClient) -> None:
    result = await query(hub, query=LIST, mode="mix", keywords="off", context_layout="sections")
    assert "## Relations (knowledge graph)" in result["context"] and "## Facts" not in result["context"]
    bad = await hub.post("/rag/query", json={"query": LIST, "context_layout": "compact"})
    assert bad.status_code == 400 and "context_layout" in bad.json()["error"]
