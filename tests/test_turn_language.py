"""The language of a turn decides the words around its context (issue 31, item 3), and a document's
language the language it is extracted and summarised in (item 4): the ``language`` setting
(``GRAPHGATE_LANGUAGE`` or a knowledge base's override) when it names one, else ``auto``, each
text's own. Real engines, the fake upstream answering as a perfect extractor; the messages the
upstream receives are what is checked."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings, SettingsError
from proxy.core.tokens import get_tokenizer
from proxy.retrieval.context import header_text
from proxy.retrieval.wording import CHINESE, ENGLISH, WORDINGS, Wording, wording_for
from proxy.text.language import detect
from tests.chat_helpers import body, chats, traces
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.anyio

ZORVEL = "Zorvel Quantum Systems Holdings"   # a Latin-script name of four words
OBANIX = "奥巴尼克斯"                          # a Chinese one
ENTITIES = {ZORVEL: "Organization", OBANIX: "Person", "柏林": "Location", "Lindqvist": "Person"}
ZH_TEXT = f"{OBANIX}创立了{ZORVEL}。\n{ZORVEL}的总部位于柏林。\n{OBANIX}住在柏林。"
EN_TEXT = f"{ZORVEL} was founded by {OBANIX}.\nLindqvist runs the research lab of {ZORVEL}."

HEADINGS = ("entities", "facts", "passages", "references")


@pytest.fixture
def extractor(fake: FakeOllama) -> KnownFacts:
    fake.structured = KnownFacts(dict(ENTITIES))
    return fake.structured


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # every chunk is found by the fake's bag-of-words vectors (unspaced Chinese is one "word" to
    # them): these tests are about the wording around a context, not about what it holds
    return settings.replace(cosine_threshold=0.0)


async def ingest(client: httpx.AsyncClient, name: str, text: str, kb: str = "default") -> None:
    made = await client.post("/rag/documents", params={"kb": kb}, json={"name": name, "text": text})
    assert made.status_code in (200, 202), made.text
    document_id = made.json()["documents"][0]["id"]
    with anyio.fail_after(20):
        while (await client.get(f"/rag/documents/{document_id}", params={"kb": kb})).json()["status"] != "processed":
            await anyio.sleep(0.02)


@pytest.fixture
async def gw(settings: Settings, fake: FakeOllama, extractor: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        await ingest(client, "zh.txt", ZH_TEXT)
        await ingest(client, "en.txt", EN_TEXT)
        yield client


async def rag_query(client: httpx.AsyncClient, question: str, kb: str = "default", **knobs: Any) -> dict[str, Any]:
    response = await client.post("/rag/query", params={"kb": kb}, json={"query": question, **knobs})
    assert response.status_code == 200, response.text
    return response.json()


def assert_worded(context: str, wording: Wording) -> None:
    """``context`` opens with ``wording``'s instructions and has its headings, and no other
    language's."""
    assert context.startswith(wording.instructions), context[:200]
    for heading in HEADINGS:
        assert getattr(wording, heading) in context, (heading, context)
    for other in WORDINGS.values():
        if other is not wording:
            assert other.instructions not in context
            assert not any(getattr(other, heading) in context for heading in HEADINGS), context


async def chat_context(client: httpx.AsyncClient, fake: FakeOllama, question: str) -> str:
    """The system message the upstream received for a chat turn asking ``question``."""
    response = await client.post("/api/chat", json=body(question))
    assert response.status_code == 200, response.text
    sent = chats(fake)[-1].json["messages"]
    assert sent[0]["role"] == "system" and question.endswith(sent[-1]["content"])   # (a prefix is taken off)
    return sent[0]["content"]


# --- the turn's wording ---

@pytest.mark.parametrize(("question", "wording"), [
    ("柏林有哪些公司？", CHINESE),
    ("Which companies are there?", ENGLISH),
    (f"{ZORVEL}的总部在哪里？", CHINESE),   # a Chinese question naming only a Latin-script entity
    (f"Who founded {OBANIX}?", ENGLISH),   # an English question naming only a Chinese entity
], ids=["chinese", "english", "chinese-naming-a-latin-name", "english-naming-a-chinese-name"])
async def test_the_question_s_language_words_the_context_on_every_surface(
        gw: httpx.AsyncClient, fake: FakeOllama, question: str, wording: Wording) -> None:
    result = await rag_query(gw, question)
    assert result["language"] == wording.language and not result["skipped"]
    assert_worded(result["context"], wording)
    assert result["tokens"]["instructions"] == get_tokenizer().count(wording.instructions)

    assert_worded(await chat_context(gw, fake, question), wording)
    chat_trace = next(t for t in await traces(gw) if t["api"] == "ollama")
    assert chat_trace["augmented"] and chat_trace["detail"]["language"] == wording.language
    query_trace = next(t for t in await traces(gw) if t["api"] == "query")
    assert query_trace["detail"]["language"] == wording.language


async def test_only_the_names_the_graph_knows_are_left_out(gw: httpx.AsyncClient) -> None:
    """Counted with the names, the four Latin words of the name outweigh the Chinese question (and
    the Chinese name the English one): the cases above hold because the known names are left out.
    A name the graph does not know counts as words of its script."""
    assert detect(f"{ZORVEL}的总部在哪里？") == "English" and detect(f"Who founded {OBANIX}?") == "Chinese"
    unknown = await rag_query(gw, "Who founded 欧若拉米斯?")
    assert unknown["language"] == "Chinese"


async def test_the_sections_layout_and_the_user_s_instructions_are_worded_too(
        gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    result = await rag_query(gw, "柏林有哪些公司？", context_layout="sections")
    assert result["context"].startswith(CHINESE.instructions)
    assert CHINESE.relations in result["context"] and CHINESE.entities in result["context"]
    assert ENGLISH.relations not in result["context"]

    context = await chat_context(gw, fake, "/[请简短回答] 柏林有哪些公司？")
    assert f"{CHINESE.user_instructions}\n请简短回答" in context and ENGLISH.user_instructions not in context
    assert f"{ENGLISH.user_instructions}\nbe brief" in await chat_context(gw, fake, "/[be brief] Who is Lindqvist?")


async def test_the_budget_counts_the_chosen_wording(gw: httpx.AsyncClient) -> None:
    """The instructions are counted as worded: a budget that holds the English ones but not the
    longer Chinese ones gives the English question a context and the Chinese one none, saying why."""
    tokenizer = get_tokenizer()
    english, chinese = (tokenizer.count(header_text(None, w)) for w in (ENGLISH, CHINESE))
    assert english < chinese
    budget = max(100, english + 20)
    assert budget < chinese
    worded = await rag_query(gw, "Who is Lindqvist?", max_total_tokens=budget)
    assert worded["context"].startswith(ENGLISH.instructions) and worded["tokens"]["total"] <= budget
    skipped = await rag_query(gw, "谁是林德奎斯特？", max_total_tokens=budget)
    assert skipped["context"] == "" and skipped["language"] == "Chinese"
    assert f"cannot hold the instructions ({chinese} tokens)" in skipped["skipped"]


async def test_a_context_turn_with_nothing_found_is_told_so_in_its_language(
        settings: Settings, fake: FakeOllama, extractor: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:   # an empty knowledge base
        for question, wording in (("柏林在哪里？", CHINESE), ("Where is Berlin?", ENGLISH)):
            reply = await client.post("/api/chat", json=body(f"/context {question}"))
            assert reply.status_code == 200 and reply.json()["message"]["content"] == wording.nothing_found


# --- the language setting ---

async def test_a_base_s_language_setting_words_every_turn_of_it(
        gw: httpx.AsyncClient, fake: FakeOllama) -> None:
    made = await gw.post("/rag/kbs", json={"name": "zhongwen", "settings": {"language": "Chinese"}})
    assert made.status_code == 201, made.text
    await ingest(gw, "en.txt", EN_TEXT, kb="zhongwen")
    for question in ("Who is Lindqvist?", f"Who founded {OBANIX}?"):
        result = await rag_query(gw, question, kb="zhongwen")
        assert result["language"] == "Chinese"
        assert_worded(result["context"], CHINESE)
    assert (await rag_query(gw, "Who is Lindqvist?"))["language"] == "English"   # the default base: auto
    # a language without a wording of its own is worded in English
    changed = await gw.patch("/rag/kbs/zhongwen", json={"settings": {"language": "Suomi"}})
    assert changed.status_code == 200 and changed.json()["effective"]["language"] == "Suomi"
    finnish = await rag_query(gw, "柏林有哪些公司？", kb="zhongwen")
    assert finnish["language"] == "English" and finnish["context"].startswith(ENGLISH.instructions)


async def test_the_gateway_s_language_setting_words_chats(
        settings: Settings, fake: FakeOllama, extractor: KnownFacts) -> None:
    async with gateway_client(settings.replace(language="Chinese"), fake) as client:
        await ingest(client, "en.txt", EN_TEXT)
        assert_worded(await chat_context(client, fake, "Who is Lindqvist?"), CHINESE)


def test_a_wording_is_found_by_its_name_or_an_alias_and_english_is_the_fallback() -> None:
    assert wording_for("Chinese") is wording_for(" chinese ") is wording_for("zh") is wording_for("中文") is CHINESE
    assert wording_for("English") is wording_for("EN") is ENGLISH
    assert wording_for("Klingon") is wording_for("") is ENGLISH
    for wording in WORDINGS.values():   # every entry is complete
        assert all(getattr(wording, f) for f in Wording.__dataclass_fields__), wording.language


@pytest.mark.parametrize(("raw", "said"), [
    ("", "expected a language's name"), ("   ", "expected a language's name"),
    ("Eng\nlish", "no control or invisible characters"), ("Chi\u200bnese", "no control or invisible characters"),
    ("x" * 65, "at most 64 characters"),
], ids=["empty", "blank", "newline", "zero-width-space", "too-long"])
def test_a_bad_language_setting_is_refused_naming_the_variable(raw: str, said: str) -> None:
    with pytest.raises(SettingsError, match=f"GRAPHGATE_LANGUAGE: invalid value .*{said}"):
        Settings.load(environ={"GRAPHGATE_LANGUAGE": raw, "GRAPHGATE_DATA_DIR": "/tmp/unused"})


def test_the_language_setting_s_values() -> None:
    assert Settings.load(environ={"GRAPHGATE_DATA_DIR": "/tmp/unused"}).language == "auto"
    for raw, value in (("AUTO", "auto"), (" Chinese ", "Chinese"), ("English", "English"),
                       ("Brazilian Portuguese", "Brazilian Portuguese"), ("中文", "中文")):
        assert Settings.load(environ={"GRAPHGATE_LANGUAGE": raw, "GRAPHGATE_DATA_DIR": "/tmp/unused"}).language == value


async def test_a_bad_language_override_is_refused_and_changes_nothing(gw: httpx.AsyncClient) -> None:
    assert (await gw.post("/rag/kbs", json={"name": "fr", "settings": {"language": "French"}})).status_code == 201
    for value in ("", "Fr\x00ench", "x" * 65):
        refused = await gw.patch("/rag/kbs/fr", json={"settings": {"language": value}})
        assert refused.status_code == 400 and "settings.language" in refused.json()["error"], refused.text
    assert (await gw.get("/rag/kbs/fr")).json()["effective"]["language"] == "French"
    back = await gw.patch("/rag/kbs/fr", json={"settings": {"language": "auto"}})
    assert back.status_code == 200 and back.json()["effective"]["language"] == "auto"


# --- extraction and summaries ---

def extraction_languages(fake: FakeOllama) -> dict[str, set[str]]:
    """Passage's first line -> the languages its extraction (and gleaning) prompts asked for."""
    asked: dict[str, set[str]] = {}
    for request in fake.requests_to("/api/chat"):
        sent = request.json or {}
        if "entities" not in ((sent.get("format") or {}).get("properties") or {}):
            continue
        said = re.search(r"Write all descriptions and keywords in (.+)\.$", sent["messages"][0]["content"])
        passage = re.search(r"<<<\n(.*?)\n", sent["messages"][-1]["content"])
        assert said and passage, sent["messages"]
        asked.setdefault(passage.group(1), set()).add(said.group(1))
    return asked


def summary_languages(fake: FakeOllama) -> dict[str, str]:
    """Summary subject -> the language its prompt asked for."""
    asked = {}
    for request in fake.requests_to("/api/chat"):
        sent = request.json or {}
        if "summary" in ((sent.get("format") or {}).get("properties") or {}):
            subject = sent["messages"][-1]["content"].split("\n", 1)[0].removeprefix("Subject: ")
            asked[subject] = re.search(r", in ([^,]+?)\. Reply", sent["messages"][0]["content"]).group(1)  # type: ignore[union-attr]
    return asked


async def test_a_document_is_extracted_and_summarised_in_its_own_language(
        settings: Settings, fake: FakeOllama, extractor: KnownFacts) -> None:
    async with gateway_client(settings.replace(summary_fragments=2), fake) as client:
        await ingest(client, "zh.txt", ZH_TEXT)
        await ingest(client, "en.txt", EN_TEXT)
        # a second document for an entity of each: two notes, summarised
        await ingest(client, "zh2.txt", "柏林是一座很大的城市。")
        await ingest(client, "en2.txt", "Lindqvist writes books about quantum sensors.")
    asked = extraction_languages(fake)
    assert asked == {f"{OBANIX}创立了{ZORVEL}。": {"Chinese"}, "柏林是一座很大的城市。": {"Chinese"},
                     f"{ZORVEL} was founded by {OBANIX}.": {"English"},
                     "Lindqvist writes books about quantum sensors.": {"English"}}
    summaries = summary_languages(fake)
    assert summaries["柏林"] == "Chinese" and summaries["Lindqvist"] == "English"
    assert summaries[ZORVEL] in ("Chinese", "English")   # described in both: its notes' majority


@pytest.mark.parametrize("where", ["gateway", "base"])
async def test_an_explicit_language_setting_overrides_the_document_s(
        settings: Settings, fake: FakeOllama, extractor: KnownFacts, where: str) -> None:
    kb = "default" if where == "gateway" else "deutsch"
    if where == "gateway":
        settings = settings.replace(language="German")
    async with gateway_client(settings.replace(summary_fragments=2), fake) as client:
        if where == "base":
            made = await client.post("/rag/kbs", json={"name": kb, "settings": {"language": "German"}})
            assert made.status_code == 201, made.text
        await ingest(client, "zh.txt", ZH_TEXT, kb=kb)
        await ingest(client, "en.txt", EN_TEXT, kb=kb)
    assert set(map(frozenset, extraction_languages(fake).values())) == {frozenset({"German"})}
    assert len(extraction_languages(fake)) == 2
    assert summary_languages(fake) and set(summary_languages(fake).values()) == {"German"}


class WithCommunities:
    """The fake's structured answers: community summaries (their prompts kept), everything else as
    the perfect extractor."""

    def __init__(self, extractor: KnownFacts) -> None:
        self.extractor = extractor
        self.prompts: list[str] = []

    def __call__(self, request: dict[str, Any]) -> str:
        if "title" in ((request.get("format") or {}).get("properties") or {}):
            self.prompts.append(request["messages"][0]["content"])
            return json.dumps({"title": "t", "summary": "s"})
        return self.extractor(request)


@pytest.mark.parametrize(("text", "setting", "language"), [
    (ZH_TEXT, "auto", "Chinese"), (EN_TEXT, "auto", "English"), (ZH_TEXT, "German", "German"),
], ids=["chinese", "english", "set-to-german"])
async def test_a_community_is_summarised_in_its_descriptions_language(
        settings: Settings, fake: FakeOllama, extractor: KnownFacts, text: str, setting: str, language: str) -> None:
    fake.structured = summaries = WithCommunities(extractor)
    async with gateway_client(settings.replace(community_summaries=True, language=setting), fake) as client:
        await ingest(client, "doc.txt", text)
        with anyio.fail_after(20):
            while not summaries.prompts:
                await anyio.sleep(0.02)
    assert all(f"Write in {language}." in prompt for prompt in summaries.prompts), summaries.prompts
