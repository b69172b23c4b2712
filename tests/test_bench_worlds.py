"""The multi-hop bench's worlds are well formed in every language (bench/multihop_world.py,
bench/multihop_zh.py), its oracle reads Chinese chunks cut anywhere (bench/multihop_oracle.py), and
the character-bigram embedder sees the words of unspaced text (bench/bigram.py).

In Chinese a name is found by substring, so the world must never let one name stand inside another,
nor let ordinary words spell one: a recall measured on such a world would count names that are not
there."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.bigram import BigramUpstream, bigram_embedding, features
from bench.multihop_oracle import OracleExtractor, holds
from bench.multihop_recall import Forgetful, Table, ask
from bench.multihop_world import PROSE, QUESTIONS, Fact, World, build_world
from bench.multihop_zh import FILLERS, PROSE_ZH, QUESTIONS_ZH, RELATIONS_ZH, SYLLABLE_CHARACTERS
from proxy.app import Settings, create_app
from proxy.core.tokens import get_tokenizer
from proxy.parsing.chunking import chunk_text

DOCS = 120
HAN = re.compile(r"[\u4e00-\u9fff]")
NAME_CHARACTERS = set(SYLLABLE_CHARACTERS.values()) | set(FILLERS)


@pytest.fixture(scope="module")
def worlds() -> dict[str, World]:
    return {language: build_world(DOCS, seed=7, language=language)
            for language in ("en", "zh", "zh-on-en", "en-on-zh")}


def test_the_english_world_is_unchanged() -> None:
    """docs/retrieval-v2.md's numbers were measured on this world: the translations' bookkeeping
    must not change one word of it (the digest was taken before they were added)."""
    world = build_world(DOCS, seed=7)
    blob = json.dumps([world.types, [(f.kind, f.source, f.target, f.sentence) for f in world.facts], world.documents,
                       [(q.kind, q.text, q.gold, q.low, q.high) for q in world.questions], world.hubs])
    assert hashlib.sha256(blob.encode()).hexdigest() == \
        "3bb294e8e4fd295a26c66817b0ba33fecbf3db0cfa73e6f7e1d0ce74965159fd"


def test_the_chinese_world_is_the_english_one_translated(worlds: dict[str, World]) -> None:
    en, zh = worlds["en"], worlds["zh"]
    assert (zh.language, zh.question_language) == ("zh", "zh")
    assert len(zh.types) == len(en.types) and len(zh.documents) == len(en.documents)
    assert [(f.kind, en.types[f.source], en.types[f.target], f.template, f.year) for f in en.facts] == \
        [(f.kind, zh.types[f.source], zh.types[f.target], f.template, f.year) for f in zh.facts]
    assert [(q.kind, q.shape, len(q.gold)) for q in en.questions] == [(q.kind, q.shape, len(q.gold))
                                                                      for q in zh.questions]
    for (_, text), layout in zip(zh.documents, zh.layouts, strict=True):
        assert " " not in text and HAN.search(text)
        assert all(fact.sentence in text for fact in layout if isinstance(fact, Fact))
    founded = next(f for f in zh.facts if f.kind == "founded" and f.template == 0)
    assert f"{founded.year}年" in founded.sentence


def test_chinese_names_are_unique_and_never_inside_one_another(worlds: dict[str, World]) -> None:
    names = list(worlds["zh"].types)
    assert len(set(names)) == len(names)
    for name in names:
        assert 2 <= len(name) <= 8, name
        assert all(HAN.match(c) or c == "·" for c in name), name
    by_length = sorted(names, key=len)
    for i, short in enumerate(by_length):
        inside = [long for long in by_length[i + 1:] if short in long]
        assert not inside, (short, inside[:3])


def test_the_name_characters_are_in_no_template_prose_or_question() -> None:
    """So that ordinary words never spell a name, nor run into one."""
    wording = [*PROSE_ZH, *(t for templates, _ in RELATIONS_ZH.values() for t in templates),
               *(p for phrasings, _ in QUESTIONS_ZH.values() for p in phrasings)]
    for text in wording:
        assert not NAME_CHARACTERS & set(text), text
        assert " " not in text
    assert len(PROSE_ZH) == len(PROSE) and set(QUESTIONS_ZH) == set(QUESTIONS)
    assert all(p.endswith(("？", "。")) for phrasings, _ in QUESTIONS_ZH.values() for p in phrasings)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_name_is_found_exactly_where_the_world_put_it(worlds: dict[str, World], language: str) -> None:
    world = worlds[language]
    names = OracleExtractor(world).names_in   # every name, longest first (none is inside another: above)
    for (document, text), layout in zip(world.documents, world.layouts, strict=True):
        placed = {n for fact in layout if isinstance(fact, Fact) for n in (fact.source, fact.target)}
        assert set(names(text)) == placed, document
    for question in world.questions:
        assert names(question.text) == list(question.low), question.text


@pytest.mark.parametrize("language", ["en", "zh", "zh-on-en", "en-on-zh"])
def test_every_gold_name_is_in_some_document(worlds: dict[str, World], language: str) -> None:
    world = worlds[language]
    documents = "\n".join(text for _, text in world.documents)
    for question in world.questions:
        assert question.gold and all(name in world.types and holds(documents, name) for name in question.gold)
        assert all(name in question.text for name in question.low)


def test_mixed_worlds_keep_the_documents_names_inside_the_other_language(worlds: dict[str, World]) -> None:
    zh_on_en, en_on_zh = worlds["zh-on-en"], worlds["en-on-zh"]
    assert zh_on_en.documents == worlds["en"].documents and en_on_zh.documents == worlds["zh"].documents
    asked = zh_on_en.questions[0]
    assert re.search(r"[A-Z][a-z]+", asked.text) and HAN.search(asked.text) and asked.text.endswith(("？", "。"))
    assert asked.high == QUESTIONS_ZH[asked.shape][1]
    asked = en_on_zh.questions[0]
    assert asked.text.endswith("?") and HAN.search(asked.text) and asked.low[0] in worlds["zh"].types
    # the Chinese questions are worded alike over either documents: only the names differ
    assert [q.text.replace(q.slot, "{x}") for q in worlds["zh"].questions] == \
        [q.text.replace(q.slot, "{x}") for q in zh_on_en.questions]

def test_the_oracle_extracts_chinese_facts_in_chinese(worlds: dict[str, World]) -> None:
    world = worlds["zh"]
    oracle = OracleExtractor(world)
    for (_, text), layout in list(zip(world.documents, world.layouts, strict=True))[:30]:
        extracted = oracle.extract(text)
        stated = [r for r in extracted["relations"] if r["weight"] == 8]
        facts = [fact for fact in layout if isinstance(fact, Fact)]
        assert [(r["source"], r["target"], r["description"]) for r in stated] == \
            [(f.source, f.target, f.sentence) for f in facts]
        assert all(r["keywords"] == list(RELATIONS_ZH[f.kind][1]) for r, f in zip(stated, facts, strict=True))
        assert {e["name"] for e in extracted["entities"]} == {n for f in facts for n in (f.source, f.target)}


def test_the_oracle_reads_chinese_chunks_cut_anywhere(worlds: dict[str, World]) -> None:
    """The real chunker's Chinese chunks, and cuts at every character of a document: a cut sentence
    states no fact, a cut name is no name, and what is whole is found."""
    world = worlds["zh"]
    oracle = OracleExtractor(world)
    facts = world.by_sentence()
    text = next(t for (_, t), layout in zip(world.documents, world.layouts, strict=True)
                if sum(isinstance(p, Fact) for p in layout) >= 3)
    pieces = [c.content for c in chunk_text(text, get_tokenizer(), size=120, overlap=30)]
    pieces += [piece for cut in range(1, len(text)) for piece in (text[:cut], text[cut:])]
    for piece in pieces:
        extracted = oracle.extract(piece)
        assert all(e["name"] in piece and e["name"] in world.types for e in extracted["entities"])
        for relation in extracted["relations"]:
            if relation["weight"] == 8:
                assert relation["description"] in facts and relation["description"] in piece
            else:
                assert relation["keywords"] == ["同时提及"]


def test_the_oracle_finds_latin_names_beside_chinese_words(worlds: dict[str, World]) -> None:
    oracle = OracleExtractor(worlds["zh-on-en"])
    question = worlds["zh-on-en"].questions[0]
    assert oracle.names_in(question.text) == list(question.low)
    name = question.low[0]
    assert not holds(f"X{name}的总部", name) and holds(f"{name}的总部", name)


def test_the_bigram_embedder_sees_the_words_of_unspaced_text() -> None:
    assert features("喀佐尔系统的总部") == ["喀佐", "佐尔", "尔系", "系统", "统的", "的总", "总部"]
    assert features("Kazor Systems的总部？") == ["ka", "az", "zo", "or", " kazor", "sy", "ys", "st", "te", "em",
                                                  "ms", " systems", "的总", "总部"]
    assert features("ＫＡＺＯＲ") == features("kazor")   # full-width forms and case folded
    question = np.array(bigram_embedding("喀佐尔系统的总部在哪里？"))
    stated = np.array(bigram_embedding("喀佐尔系统的总部位于弥伦兹。"))
    other = np.array(bigram_embedding("锡珀恩·胡沃姆在斯诺珂动力领导一个研究团队。"))
    assert question @ stated > question @ other + 0.3
    assert np.isclose(np.linalg.norm(stated), 1.0)


@pytest.mark.anyio
async def test_the_bench_reads_recall_and_linking_from_the_gateway(tmp_path: Path) -> None:
    """The real gateway on Chinese documents (the bigram embedder), asked the English questions that
    name Chinese entities: the recall cells and the linking count come from /rag/query's answers."""
    world = build_world(40, seed=3, language="en-on-zh")
    world.questions = [q for q in world.questions if q.kind == "1-hop"][:6]
    fake = BigramUpstream()
    fake.structured = OracleExtractor(world)
    fake.requests = Forgetful()
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(tmp_path), "GRAPHGATE_GLEANING": "0"})
    app = create_app(settings, upstream_transport=fake.transport())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=None) as client:
            named = {n for q in world.questions for n in (*q.gold, *q.low)}
            for name, text in world.documents:   # the documents the questions need: fewer to ingest
                if any(holds(text, n) for n in named):
                    (await client.post("/rag/documents", json={"name": name, "text": text})).raise_for_status()
            await app.state.gateway.knowledge.documents.wait_idle()
            table = Table("bigram", "oracle", "en-on-zh")
            await ask(client, world, table, {}, [4000])
    assert table.cell(4000, "1-hop").asked == 6 and table.linking.asked == 6
    assert table.cell(4000, "1-hop").names == 6
    # a name standing between spaces is linked today, Chinese or not; the count is read from the answer
    assert table.linking.fired == table.linking.named == 6, table.linking.silent
