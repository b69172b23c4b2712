"""Two knowledge bases that name the same people with other facts, behind one real gateway: every way
in (chat and /v1 through a knowledge model, /rag/query, MCP, the console's pages, traces, caches,
merge suggestions) shows only its own base's data (issue 20's isolation suite).

``hr`` holds the team (Alice Smith leads Orion at Acme Corp); ``legal`` holds the chess club (Alice
Smith and Carol White in Berlin). A word of one base found in an answer of the other is a leak."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.core.settings import Settings
from tests.corpus import CLUB, PEOPLE, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.mcp_helpers import http_session, structured, wait_processed
from tests.test_kb_settings import samples_of

pytestmark = pytest.mark.anyio

MODEL = "llama3.2:latest"
OWN = {"hr": ("Orion", "Acme"), "legal": ("chess", "Carol White")}
OTHER = {"hr": "legal", "legal": "hr"}
QUESTION = "What does Alice Smith do?"


def leaks(text: str, kb: str) -> list[str]:
    """The other base's words found in ``text``."""
    return [word for word in OWN[OTHER[kb]] if word.lower() in text.lower()]


def owns(text: str, kb: str) -> bool:
    return any(word.lower() in text.lower() for word in OWN[kb])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    data_dir = tmp_path_factory.mktemp("isolation") / "data"
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_KEYWORD_BUDGET": "30",
                                      "GRAPHGATE_ANSWER_CACHE": "true", "GRAPHGATE_SUGGEST_THRESHOLD": "0.1",
                                      "GRAPHGATE_UPSTREAM": "http://127.0.0.1:1"})
    with fake.serve() as upstream, serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        for kb, name, text in (("hr", "team.txt", TEAM), ("legal", "club.txt", CLUB)):
            assert httpx.post(f"{url}/rag/kbs", json={"name": kb}).status_code == 201
            uploaded = httpx.post(f"{url}/rag/documents", params={"kb": kb}, json={"name": name, "text": text})
            wait_processed(url, [uploaded.json()["documents"][0]["id"]], {"X-GraphGate-KB": kb})
            created = httpx.put(f"{url}/rag/models/{kb}-bot", json={"model": MODEL, "kb": kb, "mode": "local"})
            assert created.status_code == 201, created.text
        yield {"url": url, "fake": fake, "data_dir": data_dir, "upstream": upstream}


def user_chats(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r.json for r in fake.requests if r.path in ("/api/chat", "/v1/chat/completions")
            and r.json is not None and not isinstance(r.json.get("format"), dict)]


@pytest.mark.parametrize("kb", ["hr", "legal"])
def test_chats_through_a_knowledge_model_see_only_its_base(world: dict[str, Any], kb: str) -> None:
    url, fake = world["url"], world["fake"]
    message = {"role": "user", "content": f"{QUESTION} ({kb}, ollama)"}
    reply = httpx.post(f"{url}/api/chat", json={"model": f"{kb}-bot", "messages": [message], "stream": False})
    assert reply.status_code == 200 and reply.json()["model"] == f"{kb}-bot"
    sent = json.dumps(user_chats(fake)[-1]["messages"])
    assert owns(sent, kb) and not leaks(sent, kb), sent
    message = {"role": "user", "content": f"{QUESTION} ({kb}, openai)"}
    reply = httpx.post(f"{url}/v1/chat/completions", json={"model": f"{kb}-bot", "messages": [message]})
    assert reply.status_code == 200 and reply.json()["model"] == f"{kb}-bot"
    sent = json.dumps(user_chats(fake)[-1]["messages"])
    assert owns(sent, kb) and not leaks(sent, kb), sent


@pytest.mark.parametrize("kb", ["hr", "legal"])
def test_rag_reads_see_only_their_base(world: dict[str, Any], kb: str) -> None:
    url = world["url"]
    answer = httpx.post(f"{url}/rag/query", params={"kb": kb}, json={"query": QUESTION}).text
    assert owns(answer, kb) and not leaks(answer, kb)
    entity = httpx.get(f"{url}/rag/entities/Alice Smith", params={"kb": kb}).text
    assert owns(entity, kb) and not leaks(entity, kb)
    documents = httpx.get(f"{url}/rag/documents", params={"kb": kb}).json()["documents"]
    assert [d["name"] for d in documents] == [{"hr": "team.txt", "legal": "club.txt"}[kb]]


@pytest.mark.parametrize("kb", ["hr", "legal"])
async def test_mcp_sees_only_the_base_it_names(world: dict[str, Any], kb: str) -> None:
    async with http_session(world["url"]) as client:
        answer = json.dumps(structured(await client.call_tool("query", {"question": QUESTION, "kb": kb})))
        people = json.dumps(structured(await client.call_tool("get_entities", {"query": "Alice", "kb": kb})))
    assert owns(answer, kb) and not leaks(answer, kb)
    assert not leaks(people, kb)


def test_traces_and_caches_stay_in_their_base(world: dict[str, Any]) -> None:
    url = world["url"]
    for kb in ("hr", "legal"):   # one cached (non-streaming, augmented) answer in each
        httpx.post(f"{url}/api/chat", json={"model": f"{kb}-bot", "stream": False,
                                            "messages": [{"role": "user", "content": f"{QUESTION} cache {kb}"}]})
    for kb in ("hr", "legal"):
        deadline = time.monotonic() + 10   # traces are written in the background
        while True:
            traces = httpx.get(f"{url}/rag/traces", params={"kb": kb}).json()["traces"]
            if any(f"cache {kb}" in t["query"] for t in traces):
                break
            assert time.monotonic() < deadline, traces
            time.sleep(0.05)
        chat_traces = [t for t in traces if t["api"] in ("ollama", "openai")]
        assert chat_traces and {t["model"] for t in chat_traces} == {f"{kb}-bot"}
        assert not any(f"({OTHER[kb]}" in t["query"] or f"cache {OTHER[kb]}" in t["query"] for t in traces)
        assert not leaks(json.dumps(traces), kb)
        while 'id="cache-entries"' not in (own := httpx.get(f"{url}/admin/cache/answer",
                                                            params={"kb": kb, "q": f"cache {kb}"}).text):
            assert time.monotonic() < deadline, "the answer was not cached"   # written in the background
            time.sleep(0.05)
        other = httpx.get(f"{url}/admin/cache/answer", params={"kb": kb, "q": f"cache {OTHER[kb]}"}).text
        assert 'id="cache-entries"' in own and "No answer entries match" in other
        # the extraction cache holds what the model said of each chunk: only this base's chunks
        own_word, other_word = OWN[kb][0], OWN[OTHER[kb]][0]
        found = httpx.get(f"{url}/admin/cache/extract", params={"kb": kb, "q": own_word}).text
        missing = httpx.get(f"{url}/admin/cache/extract", params={"kb": kb, "q": other_word}).text
        assert 'id="cache-entries"' in found and "No extraction entries match" in missing, missing[-400:]
    default = httpx.get(f"{url}/rag/traces").json()["traces"]
    assert not any("-bot" in t["model"] for t in default)


@pytest.mark.parametrize("kb", ["hr", "legal"])
def test_console_pages_show_only_their_base(world: dict[str, Any], kb: str) -> None:
    url = world["url"]
    pages = ["/admin/documents", "/admin/entities", "/admin/graph", "/admin/chats", "/admin/suggestions",
             "/admin/entities/find?name=Alice%20Smith"]
    for page in pages:
        # params= would replace the page's own query (httpx 0.28): kb is added to it
        reply = httpx.get(f"{url}{page}{'&' if '?' in page else '?'}kb={kb}", follow_redirects=True)
        assert reply.status_code == 200, (page, reply.status_code)
        text = re.sub(r"<[^>]+>", " ", reply.text)
        assert not leaks(text, kb), (page, leaks(text, kb))
    documents = httpx.get(f"{url}/admin/documents", params={"kb": kb}).text
    assert {"hr": "team.txt", "legal": "club.txt"}[kb] in documents


def test_deleting_a_base_leaves_the_other_whole(world: dict[str, Any], tmp_path: Path) -> None:
    url = world["url"]
    assert httpx.post(f"{url}/rag/kbs", json={"name": "scratch"}).status_code == 201
    uploaded = httpx.post(f"{url}/rag/documents", params={"kb": "scratch"}, json={"name": "c.txt", "text": CLUB})
    wait_processed(url, [uploaded.json()["documents"][0]["id"]], {"X-GraphGate-KB": "scratch"})
    before = {kb: httpx.get(f"{url}/rag/stats", params={"kb": kb}).json() for kb in ("hr", "legal")}
    assert httpx.delete(f"{url}/rag/kbs/scratch", params={"confirm": "scratch"}).status_code == 200
    assert not (world["data_dir"] / "kbs" / "scratch").exists()
    after = {kb: httpx.get(f"{url}/rag/stats", params={"kb": kb}).json() for kb in ("hr", "legal")}
    assert {kb: s["documents"] for kb, s in after.items()} == {kb: s["documents"] for kb, s in before.items()}
    assert httpx.get(f"{url}/rag/documents", params={"kb": "scratch"}).status_code == 404


def test_metrics_count_each_base_under_its_own_label(world: dict[str, Any]) -> None:
    url, upstream = world["url"], world["upstream"]
    samples = samples_of(httpx.get(f"{url}/metrics").text)
    before = {kb: samples.get(("graphgate_chat_turns_augmented_total", (("kb", kb),)), 0.0) for kb in OWN}
    relays = {kb: samples.get(("graphgate_upstream_requests_total", (("kb", kb), ("kind", "chat_relay"),
                                                                     ("upstream", upstream))), 0.0)
              for kb in OWN}
    message = {"role": "user", "content": f"{QUESTION} (metrics)"}
    assert httpx.post(f"{url}/api/chat", json={"model": "hr-bot", "messages": [message],
                                               "stream": False}).status_code == 200
    deadline = time.monotonic() + 10   # the turn's counts follow its trace, written in the background
    while True:
        samples = samples_of(httpx.get(f"{url}/metrics").text)
        if samples.get(("graphgate_chat_turns_augmented_total", (("kb", "hr"),)), 0.0) > before["hr"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert samples[("graphgate_chat_turns_augmented_total", (("kb", "hr"),))] == before["hr"] + 1
    assert samples.get(("graphgate_chat_turns_augmented_total", (("kb", "legal"),)), 0.0) == before["legal"]
    assert samples[("graphgate_upstream_requests_total", (("kb", "hr"), ("kind", "chat_relay"),
                                                          ("upstream", upstream)))] == relays["hr"] + 1
    assert samples.get(("graphgate_upstream_requests_total", (("kb", "legal"), ("kind", "chat_relay"),
                                                              ("upstream", upstream))),
                       0.0) == relays["legal"]
    counts = {kb: samples[("graphgate_documents", (("kb", kb), ("status", "processed")))] for kb in OWN}
    assert counts == {"hr": 1, "legal": 1}
