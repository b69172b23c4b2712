"""An entity's line in the evidence layout shows the notes of its description the facts do not
state, those about what the question asks first (issue 32: a comparison's founding years and
headcounts live in the companies' descriptions, and the line is cut at 48 tokens: a merged
description put them past the cut). English and Chinese, the scripted extractor, real engines."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.settings import Settings
from proxy.core.tokens import get_tokenizer
from proxy.retrieval.context_evidence import ENTITY_TOKENS, NAMED_ENTITY_TOKENS, build_evidence_context, entity_text
from proxy.retrieval.found import FoundEntity, FoundRelation
from proxy.retrieval.select import word_stems
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import settle, upload

pytestmark = pytest.mark.anyio

FILLER = ("{x} runs a training centre for apprentices. {x} publishes a quarterly newsletter for its customers. "
          "{x} sponsors the regional rowing club every summer. {x} renovated its visitor centre last spring. ")
ENGLISH = {
    "Kestrel Works": FILLER.format(x="Kestrel Works")
    + "Kestrel Works was founded in 1903. Kestrel Works employs 4,120 people.",
    "Varro Mills": FILLER.format(x="Varro Mills")
    + "Varro Mills was founded in 1957. Varro Mills employs 2,310 people.",
}
FILLER_ZH = ("{x}为学徒开办了一所培训中心。{x}每季度为客户出版一份通讯。{x}每年夏天赞助当地的赛艇俱乐部。"
             "{x}去年春天翻修了访客中心。")
CHINESE = {
    "凯斯特工坊": FILLER_ZH.format(x="凯斯特工坊") + "凯斯特工坊成立于1903年。凯斯特工坊雇用了4120名员工。",
    "瓦罗磨坊": FILLER_ZH.format(x="瓦罗磨坊") + "瓦罗磨坊成立于1957年。瓦罗磨坊雇用了2310名员工。",
}


class Described(KnownFacts):
    """The scripted model, describing each entity by every sentence of the passage about it, in the
    passage's order (as a model's description of it gathers them)."""
    def extract(self, passage: str, *, gleaning: bool) -> dict[str, Any]:
        found = super().extract(passage, gleaning=gleaning)
        merged: dict[str, dict[str, Any]] = {}
        for entity in found["entities"]:
            if entity["name"] in merged:
                merged[entity["name"]]["description"] += " " + entity["description"]
            else:
                merged[entity["name"]] = dict(entity)
        return {**found, "entities": list(merged.values())}


QUESTIONS = {"en": ("Which was founded first, Kestrel Works or Varro Mills?", ("1903", "1957")),
             "zh": ("凯斯特工坊和瓦罗磨坊，哪家成立得更早？", ("1903", "1957"))}


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_a_comparison_gets_both_values_from_the_descriptions(
        settings: Settings, fake: FakeOllama, language: str) -> None:
    documents = ENGLISH if language == "en" else CHINESE
    fake.structured = Described(dict.fromkeys(documents, "Organization"))
    question, values = QUESTIONS[language]
    async with gateway_client(settings, fake) as client:
        for name, text in documents.items():
            assert (await settle(client, (await upload(client, f"{name}.txt", text))["id"]))["status"] == "processed"
        body = {"query": question, "mode": "local", "keywords": "off"}
        response = await client.post("/rag/query", json=body)
        assert response.status_code == 200, response.text
        context = response.json()["context"]
        lines = [line for line in context.splitlines() if line.startswith("- ") and any(n in line for n in documents)]
        assert all(any(value in line for line in lines) for value in values), context   # not only in passages
        # each company's line leads with its founding note, before the notes the question does not ask about
        for name, value in zip(documents, values, strict=True):
            line = next(line for line in lines if line.startswith(f"- {name} ("))
            filler = "培训" if language == "zh" else "training"   # the first note of the document
            assert value in line and line.index(value) < (line.index(filler) if filler in line else len(line)), line


def entity(name: str, description: str) -> FoundEntity:
    return FoundEntity(key=name.casefold(), name=name, type="Organization", source_ids=[], vector_key=1,
                       description=description)


def test_an_entity_line_leaves_out_what_the_facts_state_and_puts_the_asked_note_first() -> None:
    kestrel = entity("Kestrel Works", "Kestrel Works supplies steel to Varro Mills. Kestrel Works runs a school. "
                                      "Kestrel Works was founded in 1903.")
    varro = entity("Varro Mills", "Varro Mills was founded in 1957.")
    supplies = FoundRelation(pair="kestrel works\x1fvarro mills", source="kestrel works", target="varro mills",
                             source_name="Kestrel Works", target_name="Varro Mills", keywords=["supplier"],
                             weight=1.0, source_ids=[], vector_key=2,
                             description="Kestrel Works supplies steel to Varro Mills.")
    context = build_evidence_context([kestrel, varro], [supplies], [], entity_budget=500, relation_budget=500,
                                     total_budget=2000, tokenizer=get_tokenizer(),
                                     question="Which was founded first, Kestrel Works or Varro Mills?")
    line = next(line for line in context.text.splitlines() if line.startswith("- Kestrel Works ("))
    # the supply note is a fact above (left out), and naming the other company does not make a note the answer
    assert line == "- Kestrel Works (Organization): Kestrel Works was founded in 1903. Kestrel Works runs a school."
    # Chinese notes are joined without a space after the full stop
    zh = entity("凯斯特工坊", "凯斯特工坊为学徒开办了培训中心。凯斯特工坊成立于1903年。")
    assert entity_text(zh, set(), word_stems("凯斯特工坊哪年成立？") - word_stems("凯斯特工坊")) == \
        "- 凯斯特工坊 (Organization): 凯斯特工坊成立于1903年。凯斯特工坊为学徒开办了培训中心。"


def test_the_notes_of_an_entity_the_question_names_are_not_cut_at_a_pointers_length() -> None:
    """"Which has the larger revenue, X or Y?" against "Y employs 15,963 people and turned over 728.7
    million euros": no word of the question is in the note that holds the value. A named entity's
    line holds its notes up to NAMED_ENTITY_TOKENS; another's stays a pointer (ENTITY_TOKENS)."""
    notes = " ".join(f"{{x}} opened a showroom in district {i}." for i in range(6))
    value = "{x} employs 15,963 people and turned over 728.7 million euros."
    named = entity("Melvar Trading", (notes + " " + value).format(x="Melvar Trading"))
    other = entity("Ranraf Partners", (notes + " " + value.replace("728.7", "508.4")).format(x="Ranraf Partners"))
    context = build_evidence_context([named, other], [], [], entity_budget=2000, relation_budget=500,
                                     total_budget=4000, tokenizer=get_tokenizer(),
                                     question="Which has the larger revenue, Melvar Trading or Tevsuv Trading?")
    assert "728.7" in context.text and "508.4" not in context.text, context.text
    line = next(line for line in context.text.splitlines() if line.startswith("- Ranraf Partners ("))
    assert get_tokenizer().count(line) <= ENTITY_TOKENS + 2
    # named by the linking, not spelled: an alias ("MVT"), or the company of a follow-up's earlier turn
    followed = build_evidence_context([named, other], [], [], entity_budget=2000, relation_budget=500,
                                      total_budget=4000, tokenizer=get_tokenizer(),
                                      question="And how much revenue do they make?", named=frozenset({named.key}))
    assert "728.7" in followed.text and "508.4" not in followed.text, followed.text


def test_the_entities_a_question_names_share_half_the_entity_section() -> None:
    """A hub's merged description is long, and the note that answers may share no word with the
    question ("Sales at X reached 405.1 million euros" for "annual revenue"): the named entities'
    lines may take half of the section between them, so a larger budget reaches further into their
    notes; at a small one they keep NAMED_ENTITY_TOKENS."""
    notes = " ".join(f"{{x}} opened a showroom in district {i} of the old harbour town." for i in range(30))
    hub = entity("Zanwicjen Cooperative", (notes + " Sales at {x} reached 405.1 million euros.").format(
        x="Zanwicjen Cooperative"))
    other = entity("Belfas Cooperative", "Belfas Cooperative reported annual revenue of 283.1 million euros.")
    question = "What is the annual revenue of Zanwicjen Cooperative?"

    def text(entity_budget: int, entities: list[FoundEntity]) -> str:
        return build_evidence_context(entities, [], [], entity_budget=entity_budget, relation_budget=500,
                                      total_budget=8000, tokenizer=get_tokenizer(), question=question).text

    assert "405.1" in text(2000, [hub])
    assert "405.1" not in text(300, [hub])   # 150 tokens of 300: the floor of 160 holds
    line = next(line for line in text(2000, [hub]).splitlines() if line.startswith("- Zanwicjen"))
    assert NAMED_ENTITY_TOKENS < get_tokenizer().count(line) <= 1000 + 2
    # two named share it: each line is cut at a quarter of the section
    both = build_evidence_context([hub, other], [], [], entity_budget=2000, relation_budget=500, total_budget=8000,
                                  tokenizer=get_tokenizer(),
                                  question="Which has the larger revenue, Zanwicjen Cooperative or Belfas Cooperative?")
    line = next(line for line in both.text.splitlines() if line.startswith("- Zanwicjen"))
    assert NAMED_ENTITY_TOKENS < get_tokenizer().count(line) <= 500 + 2
