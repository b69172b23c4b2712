"""Every language (issue 31): one text-analysis layer (proxy/text/) cuts text into words for name
linking, relation relevance, the keyword index, chunk overlaps and evidence notes, in scripts written
with spaces and without. Chinese documents and questions are linked, found by their words and cut at
their sentences like English ones; hostile text (mixed scripts, emoji, zero-width characters,
full-width punctuation, one character) gets a context or nothing, never an error. Real engines,
the scripted model of tests/extractor.py."""

from __future__ import annotations

import httpx
import pytest

from proxy.core.names import name_words, normalised
from proxy.core.settings import Settings
from proxy.core.tokens import Tokenizer
from proxy.parsing.chunking import chunk_text
from proxy.retrieval.context_evidence import notes
from proxy.retrieval.select import keyword_match
from proxy.store.keywords_bm25 import Bm25Index
from proxy.store.name_index import EXACT, TYPO, NameIndex
from proxy.store.store import KnowledgeStore
from proxy.text.fold import fold
from proxy.text.language import detect
from proxy.text.words import stems, strong, terms, without_names
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio

# an invented world: names a dictionary does not know, written without spaces around them
ZH_NAMES = {"奥巴尼克斯实验室": "organization", "米拉·奥卡福": "person", "凯斯翠": "product", "维多利亚港": "location"}
ZH_DOCUMENT = ("奥巴尼克斯实验室是一家研究电池材料的公司。米拉·奥卡福是奥巴尼克斯实验室的首席执行官。"
               "奥巴尼克斯实验室开发了凯斯翠，一种固态电池。奥巴尼克斯实验室的总部位于维多利亚港。")


def index(*names: str) -> NameIndex:
    return NameIndex.build([name.casefold() for name in names], {})


def linked(names: NameIndex, text: str) -> list[tuple[str, float]]:
    return names.link(name_words(text))


# --- the text layer ---

def test_folding_joins_the_spellings_of_one_text() -> None:
    assert fold("Ｚｏｒｖｅｌ　Ｓｙｓｔｅｍｓ，") == "zorvel systems,"     # full-width forms
    assert fold("奥巴尼克斯實驗室") == fold("奥巴尼克斯实验室")               # traditional ~ simplified
    assert fold("zor\u200bvel\ufeff") == "zorvel"                           # nothing invisible stays
    assert normalised("Café-Noir GmbH") == normalised("cafe noir") == "cafe noir"
    assert normalised("米拉·奥卡福") == "米 拉 奥 卡 福"                       # one token a character


def test_unspaced_text_is_cut_into_words_by_each_use() -> None:
    # the keyword index: character bigrams find a name no dictionary knows
    assert {"奥巴", "巴尼", "克斯"} <= set(terms("奥巴尼克斯实验室的总部在哪里？"))
    assert set(terms("Zorvel Systems的总部")) >= {"zorvel", "systems", "总部"}
    assert terms("The ERR-4711 code") == ["err", "4711", "code"]              # English as before
    # relation words: a Han content word's first character and its bigrams meet fully (a compound's
    # leading morpheme says what it is about, as an English prefix does; its last is often a class:
    # 商, 部); a character shared elsewhere meets weakly
    assert stems("收购方由谁创办") >= {"收", "收购", "创", "创办"}
    assert stems("公司总部") >= {"公", "总", "总部"}                          # and of the words it holds
    assert strong(stems("收购方") & stems("收购")) and strong(stems("创办") & stems("创始人"))
    assert not strong(stems("制造商") & stems("供应商"))                      # maker is no supplier
    assert not strong(stems("公司总部") & stems("零部件"))                    # head office, components
    assert not strong(stems("收购") & stems("采购零件"))                      # acquiring is no purchasing
    assert stems("就职") & stems("任职") and not stems("就职") & stems("员工")  # but 职 (a post) is shared
    assert not {"的", "了", "谁"} & stems("哪家公司收购了凯斯翠的总部？")
    assert stems("Where is it headquartered?") == {"headq"}                  # English as before
    assert stems("總部") == stems("总部")


def test_keywords_met_only_by_a_character_elsewhere_in_a_word_count_half_of_one() -> None:
    asked = stems("收购了某制造商的公司总部在哪里？")
    assert keyword_match(asked, ["收购", "总部"]) == 1.0
    # 商 and 部 only: a supplier answers less than a head office met by one of its two keywords
    assert keyword_match(asked, ["供应商", "零部件"]) == 0.25
    assert keyword_match(asked, ["总部", "所在地"]) == 0.5
    assert keyword_match(stems("谁在那里工作？"), ["员工"]) == 0.5   # 工 (work): staff half answers


def test_a_questions_relation_words_leave_out_the_names_however_they_are_cut() -> None:
    asked = stems("收购了伊韦韦糖浆制造商的公司总部在哪里？")   # the product's name is cut with its neighbours
    assert without_names(asked, ["伊韦韦糖浆", "璞宁尔联合控股"]) == stems("收购了制造商的公司总部在哪里？")
    assert without_names(stems("Who chairs Zorvel Systems?"), ["Zorvel Systems"]) == {"chair"}


def test_notes_split_at_the_sentences_of_every_script() -> None:
    assert notes("A是B的客户。C收购了D！E在F？\nG. H") == ("a是b的客户", "c收购了d!", "e在f?", "g", "h")
    assert len(notes(ZH_DOCUMENT)) == 4


@pytest.mark.parametrize(("text", "language"), [
    ("Who founded Zorvel Systems?", "English"), ("奥巴尼克斯实验室的总部在哪里？", "Chinese"),
    ("東京タワーはどこですか", "Japanese"), ("", "English"), ("👍", "English")])
def test_the_language_of_a_text_is_the_script_of_its_words(text: str, language: str) -> None:
    assert detect(text) == language


def test_names_in_a_question_are_left_out_when_its_language_is_told() -> None:
    assert detect("Zorvel Systems是谁？", names=["Zorvel Systems"]) == "Chinese"
    assert detect("Who founded 奥巴尼克斯?", names=["奥巴尼克斯"]) == "English"


# --- name linking on unspaced text ---

def test_a_chinese_name_is_linked_inside_an_unspaced_question() -> None:
    names = index(*ZH_NAMES, "zorvel systems", "深圳")
    assert linked(names, "奥巴尼克斯实验室的首席执行官是谁？") == [("奥巴尼克斯实验室", EXACT)]
    assert linked(names, "奥巴尼克斯實驗室在哪裡") == [("奥巴尼克斯实验室", EXACT)]      # traditional
    assert linked(names, "米拉奥卡福在深圳工作吗") == [("米拉·奥卡福", EXACT), ("深圳", EXACT)]
    assert linked(names, "Zorvel Systems的总部在哪里？") == [("zorvel systems", EXACT)]
    assert linked(names, "Where is 维多利亚港?") == [("维多利亚港", EXACT)]


def test_a_chinese_name_tolerates_one_wrong_character_from_four_characters_on() -> None:
    names = index("奥巴尼克斯实验室", "凯斯翠", "维多利亚港")
    assert linked(names, "奥巴尼克丝实验室是做什么的") == [("奥巴尼克斯实验室", TYPO)]
    assert linked(names, "维多利亚巷在哪") == [("维多利亚港", TYPO)]
    assert linked(names, "凯斯脆是什么") == []           # three characters: exactly or not at all


def test_function_characters_and_lone_characters_link_nothing() -> None:
    names = index("的", "是", "港", "什么")
    for question in ("的", "是什么", "港在哪", "👍", "\u200b", "？？？", "a"):
        assert linked(names, question) == [], question


# --- the keyword index ---

def test_the_keyword_index_finds_chinese_text_by_its_words(tmp_path) -> None:
    keywords = Bm25Index(tmp_path / "kw")
    keywords.rebuild([1, 2, 3], ["奥巴尼克斯实验室开发了凯斯翠。", "维多利亚港是一个港口。", "The ERR-4711 code."])
    assert [key for key, _ in keywords.search("凯斯翠是谁开发的？", 3)][:1] == [1]
    assert [key for key, _ in keywords.search("維多利亞港", 3)][:1] == [2]
    assert [key for key, _ in keywords.search("err-4711", 3)] == [3]
    keywords.add([4], ["凯斯翠的电池"])
    assert {key for key, _ in keywords.search("凯斯翠", 3)} == {1, 4}


def test_a_keyword_index_saved_with_other_terms_is_rebuilt(tmp_path) -> None:
    keywords = Bm25Index(tmp_path / "kw")
    keywords.rebuild([1], ["奥巴尼克斯实验室"])
    keywords.save(generation=3)
    assert Bm25Index(tmp_path / "kw").load()
    state = tmp_path / "kw" / "state.json"
    state.write_text(state.read_text().replace('"terms": 2', '"terms": 1'))
    assert not Bm25Index(tmp_path / "kw").load()     # cut by the old tokenizer: not used


# --- chunk overlaps ---

SUPPLIERS = "".join(f"第{i}家公司是奥巴尼克斯实验室的供应商，它为凯斯翠提供电池材料。" for i in range(40))


def test_a_chinese_overlap_starts_at_a_sentence() -> None:
    # sentences of 43 tokens: an overlap of 60 always holds the start of one
    chunks = chunk_text(SUPPLIERS, Tokenizer(), size=160, overlap=60)
    assert len(chunks) > 3
    sentences = set(SUPPLIERS.replace("。", "。\n").splitlines())
    for chunk in chunks[1:]:
        first = chunk.content.split("。")[0] + "。"
        assert first in sentences, chunk.content[:40]


def test_a_chinese_overlap_too_short_for_a_sentence_starts_at_a_clause() -> None:
    chunks = chunk_text(SUPPLIERS, Tokenizer(), size=120, overlap=30)
    assert len(chunks) > 3
    for chunk in chunks[1:]:
        assert chunk.content.startswith(("它为凯斯翠提供电池材料。", "第")), chunk.content[:40]


# --- the real gateway, in Chinese ---

@pytest.fixture
def zh_facts(fake: FakeOllama) -> KnownFacts:
    fake.structured = KnownFacts(dict(ZH_NAMES))
    return fake.structured


def store_of(client: httpx.AsyncClient) -> KnowledgeStore:
    return client._transport.app.state.gateway.knowledge.store  # type: ignore[attr-defined]


async def ingest_zh(client: httpx.AsyncClient) -> None:
    document = await settle(client, (await upload(client, "奥巴尼克斯.txt", ZH_DOCUMENT))["id"])
    assert document["status"] == "processed", document


async def test_a_chinese_question_is_grounded_by_the_names_it_holds(
        settings: Settings, fake: FakeOllama, zh_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest_zh(client)
        assert store_of(client).link_sync("凯斯翠是哪家公司开发的？") == [("凯斯翠", EXACT)]
        # no vector match counts and no keyword call: only the link can ground it
        result = await query(client, query="凯斯翠是哪家公司开发的？", mode="local", keywords="off",
                             cosine_threshold=1.0, linking="on")
        assert result["entities"][0]["name"] == "凯斯翠"
        assert "奥巴尼克斯实验室开发了凯斯翠" in result["context"]
        assert "keywords" not in zh_facts.calls


async def test_the_keyword_channel_finds_a_chinese_passage(
        settings: Settings, fake: FakeOllama, zh_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest_zh(client)
        result = await query(client, query="固态电池", mode="mix", keywords="off", cosine_threshold=1.0,
                             linking="off", keyword_search="on")
        assert "一种固态电池" in result["context"]


@pytest.mark.parametrize("question", [
    "奥巴尼克斯😀实验室？", "\u200b\u200b", "？", "奥", "ＡＢＣ，。！", "Mira 奥卡福 🚀 who?", "\ufeff凯\u200d斯翠",
    "👍" * 50, "مرحبا 奥巴尼克斯", "ไทย奥巴尼克斯"])
async def test_hostile_text_gets_a_context_or_nothing_never_an_error(
        settings: Settings, fake: FakeOllama, zh_facts: KnownFacts, question: str) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest_zh(client)
        for mode in ("local", "mix"):
            response = await client.post("/rag/query", json={"query": question, "mode": mode, "keyword_search": "on"})
            assert response.status_code == 200, response.text
            assert isinstance(response.json()["context"], str)
        chat = await client.post("/api/chat", json={"model": "llama3.2", "stream": False,
                                                    "messages": [{"role": "user", "content": question}]})
        assert chat.status_code == 200, chat.text


def test_japanese_and_thai_names_are_linked_and_their_passages_found(tmp_path) -> None:
    names = index("東京タワー", "กรุงเทพ")
    assert linked(names, "東京タワーはどこにありますか？") == [("東京タワー".casefold(), EXACT)]
    assert linked(names, "ไปกรุงเทพอย่างไร") == [("กรุงเทพ", EXACT)]
    keywords = Bm25Index(tmp_path / "kw")
    keywords.rebuild([1, 2], ["東京タワーは東京都港区にある電波塔です。", "กรุงเทพเป็นเมืองหลวงของประเทศไทย"])
    assert [key for key, _ in keywords.search("東京タワーの高さ", 2)][:1] == [1]
    assert [key for key, _ in keywords.search("เมืองหลวงไทย", 2)][:1] == [2]


async def test_the_console_finds_a_chinese_entity_typed_in_traditional_characters(
        settings: Settings, fake: FakeOllama, zh_facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest_zh(client)
        for typed in ("奧巴尼克斯實驗室", "奥巴尼克斯实验室", "凯斯翠", "維多利亞港"):
            page = await client.get("/admin/entities", params={"q": typed})
            assert page.status_code == 200
            wanted = {"奧巴尼克斯實驗室": "奥巴尼克斯实验室", "維多利亞港": "维多利亚港"}.get(typed, typed)
            assert f">{wanted}</a>" in page.text, typed
        assert "No entities match" in (await client.get("/admin/entities", params={"q": "不存在的名字"})).text
