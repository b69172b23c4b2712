"""The many-shapes bench's world is what its questions claim (bench/shapes_world.py), its oracle answers
only what GraphGate's extraction schema asks and its noisy mode is seeded (bench/shapes_oracle.py),
and its runner reads recall from the real gateway (bench/shapes_recall.py).

A recall measured on a world whose gold is not in the documents, whose two compared values are the
same, whose alias documents give the answer away, or whose paraphrases use the documents' own words
would measure nothing: these tests hold the world to its design, in every language it is written in
(English, and Chinese: bench/shapes_zh.py)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from bench.multihop_oracle import SENTENCE_END, holds, name_pattern
from bench.shapes_oracle import Noise, ShapesExtractor
from bench.shapes_recall import FoldedCell, ShapesTable, ask, body, spellings
from bench.shapes_world import FOUNDED_BEFORE, LANGUAGES, SHAPES, ShapeQuestion, ShapesWorld, Statement, build_world
from bench.shapes_zh import FILLERS, SYLLABLE_CHARACTERS
from proxy.extraction.prompts import extraction_schema
from proxy.text.fold import fold
from tests.fake_ollama import FakeOllama

# a number standing alone: not part of a longer one ("4,270", "412.5") nor an amount in 万 / 亿
YEAR_LIKE = re.compile(r"(?<![\d.,])(1[0-9]{3})(?!\d|[.,]\d|[万亿])")


@pytest.fixture(scope="module", params=LANGUAGES)
def world(request: pytest.FixtureRequest) -> ShapesWorld:
    return build_world(language=request.param)


def documents_holding(world: ShapesWorld, *names: str) -> list[str]:
    return [doc for doc, text in world.documents if all(holds(text, name) for name in names)]


def uses(text: str, word: str) -> bool:
    """Whether ``text`` uses ``word``: as a whole word in a spaced script, anywhere in an unspaced one."""
    if word.isascii():
        return re.search(rf"\b{re.escape(word)}\b", text, re.I) is not None
    return word in text


def test_every_shape_has_its_questions_and_every_gold_name_is_stated(world: ShapesWorld) -> None:
    counts = Counter(q.kind for q in world.questions)
    assert set(counts) == set(SHAPES) and 230 <= len(world.documents) <= 270, (counts, len(world.documents))
    assert all(counts[shape] >= 30 for shape in SHAPES), counts
    everything = "\n".join(text for _, text in world.documents)
    stated = set(name_pattern(sorted({g for q in world.questions for g in q.gold})).findall(everything))
    for question in world.questions:
        assert question.gold, question.text
        assert set(question.gold) <= stated, question
        asked = question.text + " ".join(content for _, content in question.history)
        assert all(holds(asked, name) for name in question.low), question


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_small_world_has_every_shape(language: str) -> None:
    small = build_world(60, seed=5, questions=3, language=language)
    assert {q.kind for q in small.questions} == set(SHAPES)
    assert len(small.documents) < 100


def test_names_never_stand_inside_one_another(world: ShapesWorld) -> None:
    """A gold name found in a context is that entity: no name holds another as a whole word."""
    names = sorted(world.names, key=len)
    for i, short in enumerate(names):
        assert not [long for long in names[i + 1:] if holds(long, short)], short


def test_an_answer_found_in_a_context_answers_for_one_company(world: ShapesWorld) -> None:
    """Head-office cities, chairs, founders and chief executives belong to one company each, and a head
    office's city hosts no plant or fair: a city in the context is not another firm's answer."""
    companies = list(world.companies.values())
    for attribute in ("hq", "chair", "founder"):
        values = [getattr(c, attribute) for c in companies]
        assert len(set(values)) == len(values), attribute
    chiefs = [person for c in companies for person, _, _ in c.ceos]
    assert len(set(chiefs)) == len(chiefs)
    offices = {c.hq for c in companies}
    venues = {r.target for s in world.statements for r in s.relations if r.kind in ("plant", "fair")}
    assert offices and venues and not offices & venues
    lenders = [c.lender for c in companies if c.hub]
    assert len(set(lenders)) == len(lenders)


def test_compared_values_differ_and_belong_to_their_company(world: ShapesWorld) -> None:
    for question in (q for q in world.questions if q.kind == "comparison"):
        x, y, x_value, y_value = question.gold
        assert x != y and x_value != y_value, question.text
        for company, value in ((x, x_value), (y, y_value)):
            assert documents_holding(world, company, value), (question.text, company, value)
    # every year before 1980 in the text is one company's founding year: a year found is that company's
    years = Counter(int(y) for _, text in world.documents for y in YEAR_LIKE.findall(text) if int(y) < FOUNDED_BEFORE)
    founded = {c.founded for c in world.companies.values()}
    assert set(years) == founded and len(founded) == len(world.companies)


def test_aliases_appear_as_intended(world: ShapesWorld) -> None:
    assert len(world.aliases) >= 15
    for alias, full in world.aliases.items():
        together = documents_holding(world, alias, full)
        assert len(together) == 1 and together[0].startswith("announcement"), (alias, together)
        text = dict(world.documents)[together[0]]   # in brackets right after the name, or set off before it
        bracketed = re.escape(full) + r"\s*[(（][^)）]*?[“\"]?" + re.escape(alias) + r"[”\"]?[)）]"
        assert re.search(bracketed, text) or f"{alias}, short for {full}" in text, (alias, full)
        assert len(documents_holding(world, alias)) >= 3 and len(documents_holding(world, full)) >= 2
    asked = [q for q in world.questions if q.kind.startswith("alias")]
    assert {q.kind for q in asked} == {"alias by full name", "alias by alias"}
    for question in asked:
        (name,) = question.low
        assert (name in world.aliases) == (question.kind == "alias by alias")
        for gold in question.gold:   # stated only where the other name stands
            assert not documents_holding(world, name, gold), (question.text, gold)
            other = world.aliases.get(name) or world.companies[name].alias
            assert documents_holding(world, other, gold), (question.text, gold)


def test_paraphrases_use_words_no_document_has_on_hubs_of_many_relations(world: ShapesWorld) -> None:
    words = world.wording.paraphrase_words
    for doc, text in world.documents:
        used = [w for w in words if uses(text, w)]
        assert not used, (doc, used)
    keywords = {k for kind in world.relation_keywords.values() for k in kind}
    assert not [w for w in words for k in keywords if uses(k, w)]   # nor does an extracted relation
    for question in (q for q in world.questions if q.kind == "paraphrase"):
        assert any(uses(question.text, w) for w in words), question.text
    for hub in world.hubs:
        relations = [r for s in world.statements for r in s.relations if hub in (r.source, r.target)]
        assert len(relations) >= 50 and len({r.kind for r in relations}) >= 10, hub


def test_updated_facts_change_in_a_later_document(world: ShapesWorld) -> None:
    datelines = [layout[0] for layout in world.layouts]
    assert all(isinstance(s, Statement) and s.kind == "dateline" for s in datelines)
    dated = {doc: int(dict(s.slots)["date"][:4]) for (doc, _), s in zip(world.documents, datelines, strict=True)
             if isinstance(s, Statement)}
    assert all(s.text in text for (_, text), s in zip(world.documents, datelines, strict=True)
               if isinstance(s, Statement))
    updated = [q for q in world.questions if q.kind == "updated"]
    assert len(updated) >= 30
    for question in updated:
        ((new,), (old,), (company,)) = question.gold, question.stale, question.low
        assert new != old
        (stated_new,) = documents_holding(world, company, new)
        (stated_old,) = documents_holding(world, company, old)
        assert dated[stated_old] < dated[stated_new], question.text


def test_negatives_counts_and_temporal_questions_follow_the_answer_key(world: ShapesWorld) -> None:
    products = {p: c.name for c in world.companies.values() for p in c.products}
    for question in world.questions:
        slots = dict(question.slots)
        if question.kind == "negative":
            company = world.companies[slots["x"]]
            assert products[slots["p"]] != company.name and question.gold == tuple(company.products)
            assert world.companies[products[slots["p"]]].sector == company.sector
        elif question.kind == "count":
            company = world.companies[slots["x"]]
            assert question.gold in (tuple(company.products), tuple(company.acquisitions))
            assert len(question.gold) >= 2
        elif question.kind == "temporal":
            chain = [person for person, _, _ in world.companies[slots["x"]].ceos]
            pairs = list(zip(chain, chain[1:], strict=False))
            assert ((question.gold[0], slots["z"]) in pairs) if "z" in slots else ((slots["w"], question.gold[0])
                                                                                     in pairs)
        elif question.kind == "follow-up":
            (name,) = question.low
            assert name not in question.text and name in question.history[0][1]
        elif question.kind == "no entity":
            assert not question.low and len(question.gold) >= 1


def test_the_oracle_answers_only_what_the_extraction_schema_asks(world: ShapesWorld) -> None:
    schema = extraction_schema()["properties"]
    entity_keys = set(schema["entities"]["items"]["properties"])
    relation_keys = set(schema["relations"]["items"]["properties"])
    oracle = ShapesExtractor(world)
    company = next(c for c in world.companies.values() if not c.hub and not c.alias)
    profile = next(text for doc, text in world.documents if doc.startswith("profile") and company.name in text)
    extracted = oracle.extract(profile)
    assert set(extracted) == {"entities", "relations"}
    assert all(set(e) == entity_keys for e in extracted["entities"])
    assert all(set(r) == relation_keys for r in extracted["relations"])
    described = next(e for e in extracted["entities"] if e["name"] == company.name)
    assert str(company.founded) in described["description"]   # an attribute reaches its entity's description
    assert len([s for s in SENTENCE_END.split(described["description"]) if s.strip()]) <= 3
    # the sentence that introduces an abbreviation names one company, not two
    alias, full = next(iter(world.aliases.items()))
    announcement = documents_holding(world, alias, full)[0]
    names = {e["name"] for e in oracle.extract(dict(world.documents)[announcement])["entities"]}
    assert full in names and alias not in names


def test_the_noisy_extractor_is_seeded_and_varies_names(world: ShapesWorld) -> None:
    perfect, noisy = ShapesExtractor(world), ShapesExtractor(world, Noise(7))
    texts = [text for _, text in world.documents[:80]]
    first = [noisy.extract(text) for text in texts]
    assert first == [noisy.extract(text) for text in reversed(texts)][::-1]   # the same whatever the order
    assert first != [ShapesExtractor(world, Noise(8)).extract(text) for text in texts]
    entities = varied = relations = kept = 0
    forms: Counter[str] = Counter()
    texts = [text for _, text in world.documents]   # all of them: a company's variants are a few in a hundred
    for text, garbled in zip(texts, (noisy.extract(text) for text in texts), strict=True):
        clean = perfect.extract(text)
        entities += len(clean["entities"])
        for before, after in zip(clean["entities"], garbled["entities"], strict=True):
            if before["name"] != after["name"]:
                varied += 1
                assert after["name"] in Noise.variants(before["name"], before["type"], world.language)
                forms[form(before["name"], after["name"])] += 1
        relations += len(clean["relations"])
        kept += len(garbled["relations"])
        names = {e["name"] for e in garbled["entities"]}
        assert all(r["source"] in names and r["target"] in names for r in garbled["relations"])
    assert 0.10 < varied / entities < 0.20 and 0.05 < 1 - kept / relations < 0.15, (varied / entities, kept)
    expected = {"en": {"case", "{} Inc.", "{} Ltd", "{} GmbH", "The {}"},
                "zh": {"traditional", "{}有限公司", "{}市", "“{}”", "shortened", "another dot"}}[world.language]
    assert expected <= set(forms), forms


def form(name: str, variant: str) -> str:
    """How ``variant`` writes ``name``: with what around it, in another case or script, shorter, another dot."""
    if name in variant:
        return variant.replace(name, "{}")
    if fold(name) == fold(variant):
        return "case" if name.isascii() else "traditional"
    if variant.replace("•", "·").replace("・", "·") == name or "·" in name and variant == name.replace("·", ""):
        return "another dot"
    return "shortened" if name.startswith(variant) else variant


def test_folded_cells_find_a_name_whatever_its_case() -> None:
    question = ShapeQuestion("1-hop", "Who chairs Kravon Brothers?", ("Belash Dorvin", "1903"), (), ())
    cell = FoldedCell()
    cell.add(question, "The chair is BELASH DORVIN; founded 1903.")
    cell.add(question, "Belash Dorvinson, founded 19031.")
    assert (cell.asked, cell.recalled, cell.names_found) == (2, 1, 2)
    assert cell.missed == [("Who chairs Kravon Brothers?", ["Belash Dorvin", "1903"])]


def test_folded_cells_find_a_chinese_name_as_a_reader_would() -> None:
    """Traditional characters, and the spellings the noisy extractor writes, are the name; a number
    inside a longer one is not the number."""
    gold = ("贝温尔兄弟集团", "阿蓓尔·涅泰蒂", "4,270")
    question = ShapeQuestion("1-hop", "贝温尔兄弟集团的董事会主席是谁？", gold, (), ())
    cell = FoldedCell(spellings={"贝温尔兄弟集团": ("贝温尔兄弟",), "阿蓓尔·涅泰蒂": ("阿蓓尔涅泰蒂",)})
    cell.add(question, "貝溫爾兄弟集團的董事会主席是阿蓓尔涅泰蒂，员工4,270人。")
    cell.add(question, "贝温尔兄弟的董事会主席是阿蓓尔·涅泰蒂，员工14,270人。")
    assert (cell.asked, cell.recalled) == (2, 1) and cell.missed[0][1] == ["4,270"]


def test_each_sentence_names_what_the_world_put_there(world: ShapesWorld) -> None:
    """The names found in a statement are its slots' names, and prose names nothing: no name is spelt
    by a template's words or by two names side by side (in Chinese, with no spaces, that matters)."""
    pattern = name_pattern(list(world.names))
    for statement in world.statements:
        slots = {value for _, value in statement.slots if value in world.names}
        assert set(pattern.findall(statement.text)) == slots, statement.text
    for template in world.wording.prose:
        assert not pattern.findall(template.format(n=42)), template
    for question in world.questions:
        asked = question.text + "".join(content for _, content in question.history)
        assert set(pattern.findall(asked)) == {v for _, v in question.slots if v in world.names}, question.text


def test_the_chinese_world_writes_names_numbers_and_short_forms_the_chinese_way() -> None:
    """The same facts as the English world of the same seed; dates as 年月日, revenue in 亿 / 万 euros;
    the name characters used nowhere else; short forms made of the name's characters (its first and
    its descriptor's), a quarter of them the English acronym, introduced in brackets after the name."""
    english, chinese = build_world(), build_world(language="zh")
    assert [(c.founded, c.headcount, c.revenue, c.sector) for c in english.companies.values()] == \
        [(c.founded, c.headcount, c.revenue, c.sector) for c in chinese.companies.values()]
    assert [(q.kind, q.shape, q.template, len(q.gold)) for q in english.questions] == \
        [(q.kind, q.shape, q.template, len(q.gold)) for q in chinese.questions]
    everything = "".join(text for _, text in chinese.documents)
    assert re.search(r"20\d\d年\d{1,2}月\d{1,2}日讯。", everything) and re.search(r"\d\.\d+亿欧元", everything)
    assert re.search(r"\d{4}万欧元", everything) and "million" not in everything
    names = name_pattern(list(chinese.names))
    rest = names.sub("", everything + "".join(q.text for q in chinese.questions))
    assert not set(rest) & set("".join(SYLLABLE_CHARACTERS.values()) + FILLERS)
    latin = [alias for alias in chinese.aliases if alias.isascii()]
    assert 2 <= len(latin) <= len(chinese.aliases) // 2
    for alias, full in chinese.aliases.items():
        if not alias.isascii():
            assert alias[0] == full[0] and alias not in full and 2 <= len(alias) <= 3, (alias, full)
    forms = Counter(re.sub(r"^.*?（|）.*$", "", s.text).replace(dict(s.slots)["k"], "{}")
                    for s in chinese.statements if s.kind.startswith("alias"))
    assert set(forms) == {"简称{}", "{}", "以下简称“{}”"}, forms


@pytest.mark.anyio
@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_bench_asks_the_real_gateway_with_earlier_turns(tmp_path: Path, language: str) -> None:
    """A few questions through /rag/query of the real app (the documents they name ingested): follow-ups
    carry their earlier turns as history, and every cell and the stale count come from the answers."""
    import argparse

    from bench.multihop_recall import gateway, ingest

    small = build_world(60, seed=5, questions=2, language=language)
    small.questions = [q for q in small.questions if q.kind in ("follow-up", "updated", "comparison")]
    follow_up = next(q for q in small.questions if q.kind == "follow-up")
    sent = body(follow_up, "mix", 4000, "off", {})
    assert sent["history"][0] == {"role": "user", "content": follow_up.history[0][1]} and sent["keywords"] == "off"
    named = {n for q in small.questions for n in (*q.low, *q.gold)}
    documents = [(doc, text) for doc, text in small.documents if any(holds(text, n) for n in named)]
    fake = FakeOllama(embed_dim=64)
    fake.structured = ShapesExtractor(small)
    async with gateway(fake, tmp_path) as (app, client):
        stats, _ = await ingest(app, client, documents, tmp_path)
        table = ShapesTable("perfect", "hash", "off", language, spellings(small))
        await ask(client, small, table, argparse.Namespace(budgets=[4000], mode="mix"), {})
    assert stats["entities"] > 0
    asked = Counter(q.kind for q in small.questions)
    assert {kind: table.cell(4000, kind).asked for kind in asked} == dict(asked)
    assert table.cell(4000, "all").asked == len(small.questions) and table.stale[4000][1] == asked["updated"]
    assert "| follow-up | 2 |" in table.markdown()
