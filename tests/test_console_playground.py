"""The console's playground: the form with every knob, a run over a real corpus, validation, CSRF,
and the answer streamed over SSE from a single-use token."""

from __future__ import annotations

import html
import re
from typing import Any

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.corpus import CITY, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.playground_helpers import Summarising, cells, channel_counts, rows, run
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.replace(top_k=17, chunk_top_k=9, cosine_threshold=0.15, mode="hybrid", chunk_selection="weight")


def field(page: str, name: str) -> str:
    match = re.search(rf'<input type="number" name="{name}" value="([^"]*)"', page)
    assert match, f"no input {name}"
    return match.group(1)


def selected(page: str, name: str) -> str:
    select = re.search(rf'<select name="{name}">(.*?)</select>', page, re.DOTALL)
    assert select, f"no select {name}"
    return must_find(r'<option value="([^"]*)" selected>', select.group(1)).group(1)


async def ingest(client: httpx.AsyncClient) -> None:
    for name, text in (("team.txt", TEAM), ("city.md", CITY)):
        assert (await settle(client, (await upload(client, name, text))["id"]))["status"] == "processed"


@pytest.fixture
async def corpus(client: httpx.AsyncClient, facts: KnownFacts) -> httpx.AsyncClient:
    await ingest(client)
    return client


def capture_traces(client: httpx.AsyncClient) -> list[Any]:
    kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
    recorded: list[Any] = []
    kb.record = recorded.append
    return recorded


async def test_page_shows_every_knob_prefilled_with_the_settings(client: httpx.AsyncClient) -> None:
    response = await client.get("/admin/playground")
    assert response.status_code == 200
    page = response.text
    assert {name: field(page, name) for name in ("top_k", "chunk_top_k", "max_entity_tokens", "max_relation_tokens",
                                                 "max_total_tokens", "cosine_threshold", "related_chunks")} == {
        "top_k": "17", "chunk_top_k": "9", "max_entity_tokens": "6000", "max_relation_tokens": "8000",
        "max_total_tokens": "30000", "cosine_threshold": "0.15", "related_chunks": "5"}
    assert field(page, "num_ctx") == ""
    assert (selected(page, "mode"), selected(page, "chunk_selection"), selected(page, "keywords")) == (
        "hybrid", "weight", "llm")
    for name in ("local", "global", "hybrid", "mix", "naive", "bypass"):
        assert f'<option value="{name}"' in page
    assert '<textarea name="query"' in page and '<textarea name="history"' in page
    assert 'name="answer" value="1"' in page and 'name="model" value=""' in page
    assert 'hx-post="/admin/playground" hx-target="#results"' in page and 'method="post"' in page
    assert (await client.get("/admin/static/htmx/ext/sse.js")).status_code == 200


async def test_a_run_shows_every_step_and_is_traced(corpus: httpx.AsyncClient) -> None:
    # the sections layout, whatever the default: every section of the context has its table
    response = await run(corpus, query="Who leads the Orion project?", mode="mix", top_k="10",
                         context_layout="sections")
    assert response.status_code == 200, response.text
    page = response.text
    assert page.startswith("<!doctype html>") and '<textarea name="query"' in page
    # the form keeps what was sent
    assert "Who leads the Orion project?</textarea>" in page and field(page, "top_k") == "10"
    entities = must_find(r'<table id="result-entities">.*?</table>', page, re.DOTALL).group(0)
    assert "<td>Alice Smith</td>" in entities and "<td>Orion</td>" in entities
    context = html.unescape(must_find(r'<pre id="context">(.*?)</pre>', page, re.DOTALL).group(1))
    assert "Alice Smith leads the Orion project." in context
    timings = must_find(r'<table id="timings">.*?</table>', page, re.DOTALL).group(0)
    assert all(f"<td>{step}</td>" in timings for step in ("keywords", "embedding", "total"))
    assert '<dl class="pairs" id="tokens"><dt>instructions</dt>' in page and "<dt>total</dt>" in page
    assert "<tr><td>Alice Smith</td><td>Orion</td><td>mentioned together</td>" in page  # relations
    assert '<table id="result-chunks">' in page and "<summary>Alice Smith leads the Orion project." in page
    assert "<dt>window_source</dt><dd>none</dd>" in page and "team.txt" in page  # budget, references

    with anyio.fail_after(10):
        while True:
            traces = (await corpus.get("/rag/traces")).json()["traces"]
            if traces:
                break
            await anyio.sleep(0.05)
    trace = traces[0]
    assert (trace["api"], trace["mode"], trace["query"], trace["augmented"]) == (
        "console", "mix", "Who leads the Orion project?", True)
    assert set(trace["detail"]) == {"keywords", "tokens", "language", "timings", "budget", "channels"}


async def test_htmx_gets_the_fragment_only(corpus: httpx.AsyncClient) -> None:
    response = await run(corpus, htmx=True, query="Where is Acme Corp?", mode="naive", num_ctx="4096")
    assert response.status_code == 200, response.text
    body = response.text
    assert body.lstrip().startswith('<section class="card" id="playground-result">')
    assert "<html" not in body and "<textarea" not in body and 'id="flash"' not in body
    assert "<dt>window_source</dt><dd>request</dd>" in body and "<dt>window</dt><dd>4096</dd>" in body
    assert "None (naive mode)." in body and "data-answer-stream" not in body


async def test_history_lines_become_messages(corpus: httpx.AsyncClient, fake: FakeOllama) -> None:
    fake.reply = ["ok"]
    response = await run(corpus, query="And Bob?", keywords="off", answer="1", model="qwen3",
                         history="user: Who leads Orion?\n\nAssistant:  Alice Smith.\n")
    assert response.status_code == 200, response.text
    assert '<div class="answer">ok</div>' in response.text  # without htmx the answer is generated inline
    sent = fake.requests_to("/api/chat")[-1].json
    assert sent["model"] == "qwen3"
    assert [(m["role"], m["content"]) for m in sent["messages"][1:]] == [
        ("user", "Who leads Orion?"), ("assistant", "Alice Smith."), ("user", "And Bob?")]
    assert sent["messages"][0]["role"] == "system" and "Bob Jones" in sent["messages"][0]["content"]


async def test_missing_csrf_is_refused(client: httpx.AsyncClient) -> None:
    await client.get("/admin/playground")
    recorded = capture_traces(client)
    response = await client.post("/admin/playground", data={"query": "Who?"})
    assert response.status_code == 403 and "CSRF" in response.text
    response = await run(client, token="forged", query="Who?")
    assert response.status_code == 403
    assert recorded == []


@pytest.mark.parametrize(("form", "message"), [
    ({"top_k": "abc"}, "top_k must be a whole number"),
    ({"top_k": "-1"}, "top_k must be between 1 and 1000"),
    ({"cosine_threshold": "1.5"}, "cosine_threshold must be between 0 and 1"),
    ({"related_chunks": "2.5"}, "related_chunks must be a whole number"),
    ({"num_ctx": "0"}, "num_ctx must be a positive whole number"),
    ({"mode": "everything"}, "mode must be one of local, global, hybrid, mix, naive, bypass"),
    ({"history": "user: hi\nwhat then?"}, "history line 2 should read"),
    ({"query": "  "}, "query is required"),
])
async def test_bad_input_is_a_readable_400_and_nothing_runs(client: httpx.AsyncClient, fake: FakeOllama,
                                                            form: dict[str, str], message: str) -> None:
    recorded = capture_traces(client)
    before = len(fake.requests)
    fields: dict[str, Any] = {"query": "Who leads Orion?", **form}
    response = await run(client, **fields)
    assert response.status_code == 400
    assert html.escape(message, quote=True) in response.text and "Traceback" not in response.text
    assert "<h1>Something went wrong</h1>" in response.text
    response = await run(client, htmx=True, **{"query": "Who leads Orion?", **form})
    assert response.status_code == 400 and response.headers["hx-retarget"] == "#flash"
    assert recorded == [] and len(fake.requests) == before  # no keyword call, no embedding


async def test_the_answer_streams_escaped_and_the_token_is_single_use(corpus: httpx.AsyncClient,
                                                                     fake: FakeOllama) -> None:
    fake.reply = ["Alice leads ", "<b>Orion</b>", " & more.\n", "<script>x()</script>"]
    calls = len(fake.requests_to("/api/chat"))
    response = await run(corpus, htmx=True, query="Who leads the Orion project?", answer="1")
    assert response.status_code == 200, response.text
    fragment = response.text
    assert '<div id="answer-stream" data-answer-stream="/admin/playground/answer/' in fragment
    url = must_find(r'data-answer-stream="(/admin/playground/answer/[^"]+)"', fragment).group(1)
    assert len(fake.requests_to("/api/chat")) == calls + 1  # keywords only: the answer waits for its stream

    stream = await corpus.get(url)
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    events = [block for block in stream.text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    assert events[0] == ": answer\nretry: 86400000"
    tokens = [e for e in events if e.startswith("event: token")]
    assert tokens == ["event: token\ndata: Alice leads ", "event: token\ndata: &lt;b&gt;Orion&lt;/b&gt;",
                      "event: token\ndata:  &amp; more.&#10;",
                      "event: token\ndata: &lt;script&gt;x()&lt;/script&gt;"]
    assert events[-1].startswith("event: done\n")
    final = "\n".join(line.removeprefix("data: ") for line in events[-1].splitlines()[1:])
    assert ('<div class="answer">Alice leads &lt;b&gt;Orion&lt;/b&gt; &amp; more.\n'
            '&lt;script&gt;x()&lt;/script&gt;</div>') in final
    assert "<b>" not in stream.text and "<script>" not in stream.text

    sent = fake.requests_to("/api/chat")[-1].json
    assert sent["stream"] is True and sent["model"] == "llama3.2:latest"
    assert sent["messages"][0]["role"] == "system" and "Alice Smith" in sent["messages"][0]["content"]
    assert sent["messages"][-1] == {"role": "user", "content": "Who leads the Orion project?"}

    again = await corpus.get(url)
    assert again.status_code == 404 and "expired" in again.text


@pytest.mark.parametrize(("model", "message", "partial"), [
    ("fail-500", "llama runner process has terminated", ""),
    ("midstream-error", "the model failed: an error was encountered while running the model", "Hello from"),
    ("no-such-model", "model &#39;no-such-model&#39; not found", ""),
])
async def test_upstream_failures_become_an_error_event(client: httpx.AsyncClient, model: str, message: str,
                                                       partial: str) -> None:
    fragment = (await run(client, htmx=True, query="Who?", mode="bypass", answer="1", model=model)).text
    url = must_find(r'data-answer-stream="(/admin/playground/answer/[^"]+)"', fragment).group(1)
    stream = await client.get(url)
    assert stream.status_code == 200
    last = stream.text.replace("\r\n", "\n").strip().split("\n\n")[-1]
    assert last.startswith("event: error\n") and "The answer failed:" in last and message in last
    assert partial in last and "Traceback" not in stream.text


async def test_unknown_or_expired_tokens_are_404(client: httpx.AsyncClient) -> None:
    assert (await client.get("/admin/playground/answer/nope")).status_code == 404
    fragment = (await run(client, htmx=True, query="Who?", mode="bypass", answer="1")).text
    token = must_find(r'data-answer-stream="/admin/playground/answer/([^"]+)"', fragment).group(1)
    store = client._transport.app.state.gateway.console.pending  # type: ignore[attr-defined]
    store._answers[token] = (0.0, store._answers[token][1])   # expired (in memory: the embedded store)
    assert (await client.get(f"/admin/playground/answer/{token}")).status_code == 404
    assert token not in store._answers


# --- the stages panel: what each retrieval stage contributed (issue 18, item 8) ---

# the channels named, whatever the settings' defaults: linking on, the other switched channels off
STAGES = {"mode": "mix", "linking": "on", "expansion": "off", "keyword_search": "off", "communities": "off",
          "context_layout": "sections"}
QUESTION = "Who leads the Orion project?"


def keyword_source(page: str) -> str:
    return must_find(r'<dd id="keyword-source">(.*?)</dd>', page, re.DOTALL).group(1)


async def test_the_stages_panel_shows_what_each_channel_found(corpus: httpx.AsyncClient) -> None:
    recorded = capture_traces(corpus)
    page = (await run(corpus, htmx=True, query=QUESTION, **STAGES)).text
    counted = channel_counts(page)
    # Orion is named: the linked channel finds it without the model; the low-level keywords' and
    # the question's own vector searches run too (no high-level keywords here: no relation search)
    ran = {"linked", "described", "entities", "relations", "chunks"}
    assert {"linked", "entities", "chunks"} <= set(counted) <= ran
    assert counted["linked"]["entities"] >= 1 and counted["chunks"]["chunks"] >= 1
    # a named entity: the described channel (a question naming none) ran and found nothing
    assert not any(counted.get("described", {}).values())
    assert counted["chunks"]["entities"] == counted["chunks"]["relations"] == 0
    assert '<span class="badge">llm</span>' in keyword_source(page)
    assert "back within the keyword budget" in keyword_source(page)
    assert "no re-ranking server" in must_find(r'<dd id="rerank">(.*?)</dd>', page, re.DOTALL).group(1)
    timings = must_find(r'<table id="timings">.*?</table>', page, re.DOTALL).group(0)
    assert all(f"<td>{step}</td>" in timings for step in ("embedding", "graph", "fusion", "chunks", "total"))
    assert '<meter min="0" max="' in timings

    # the same query through /rag/query: the same channels, and each item's finders and fused rank
    result = await query(corpus, query=QUESTION, **STAGES)
    assert result["channels"] == counted
    assert recorded[0].detail["channels"] == counted   # the trace keeps them
    for kind in ("entities", "relations"):
        items = result[kind]
        assert items and [item["rank"] for item in items] == list(range(1, len(items) + 1))
        assert all(item["channels"] and set(item["channels"]) <= set(counted) for item in items)
    orion = next(e for e in result["entities"] if e["name"] == "Orion")
    assert "linked" in orion["channels"]
    assert any("linked" in r["channels"] and "Orion" in (r["source"], r["target"]) for r in result["relations"])
    # ... as the page shows them: rank and "found by" per row
    entities = cells(page, "result-entities")
    assert {name: (row[2], row[3]) for name, row in entities.items()} == {
        e["name"]: (str(e["rank"]), " ".join(e["channels"])) for e in result["entities"]}
    relations = [(row[0], row[1], row[3], row[4]) for row in rows(page, "result-relations")]
    assert relations == [(r["source"], r["target"], str(r["rank"]), " ".join(r["channels"]))
                         for r in result["relations"]]
    assert "communities" not in result and 'id="result-communities"' not in page


async def test_naive_mode_shows_only_the_chunk_channel(corpus: httpx.AsyncClient) -> None:
    page = (await run(corpus, htmx=True, query="Where is Acme Corp?", **{**STAGES, "mode": "naive"})).text
    counted = channel_counts(page)
    assert list(counted) == ["chunks"] and counted["chunks"]["chunks"] >= 1
    assert "none: naive mode searches the passages with the question's own vector" in keyword_source(page)
    result = await query(corpus, query="Where is Acme Corp?", **{**STAGES, "mode": "naive"})
    assert result["channels"] == counted and result["entities"] == result["relations"] == []
    assert {c["origin"] for c in result["chunks"]} == {"vector"}


async def test_a_keyword_call_not_back_within_the_budget_shows_as_late(corpus: httpx.AsyncClient,
                                                                       fake: FakeOllama) -> None:
    fake.hold_structured = anyio.Event()   # the keyword call cannot come back until the page is answered
    try:
        with anyio.fail_after(10):
            page = (await run(corpus, htmx=True, query="Who works at Acme Corp?", keyword_budget="0.05",
                              **STAGES)).text
    finally:
        fake.hold_structured.set()
    source = keyword_source(page)
    assert '<span class="badge">late</span>' in source
    assert "the keyword call was not back within the keyword budget (0.05 s)" in html.unescape(source)
    assert "linked" in channel_counts(page)
    acme = cells(page, "result-entities")["Acme Corp"]
    assert "linked" in acme[3].split()   # found by name while the call was out


async def test_rerank_scores_are_shown_beside_the_origin(settings: Settings, fake: FakeOllama,
                                                        facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(rerank_url="http://rerank.test"), fake) as client:
        await ingest(client)
        page = (await run(client, htmx=True, query=QUESTION, **STAGES)).text
        result = await query(client, query=QUESTION, **STAGES)
    rerank = must_find(r'<dd id="rerank">(.*?)</dd>', page, re.DOTALL).group(1)
    assert rerank == result["rerank"] and "re-ranked" in rerank
    chunks = must_find(r'<table id="result-chunks">.*?</table>', page, re.DOTALL).group(0)
    assert '<th class="num">Re-rank score</th>' in chunks
    shown = re.findall(r'<td class="num rerank-score">([^<]*)</td><td>([^<]*)</td>', chunks)
    assert shown == [(str(c["rerank_score"]), c["origin"]) for c in result["chunks"]]


async def test_community_summaries_are_listed_escaped(settings: Settings, fake: FakeOllama,
                                                      facts: KnownFacts) -> None:
    fake.structured = Summarising(facts)
    async with gateway_client(settings.replace(community_summaries=True), fake) as client:
        kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
        await ingest(client)
        with anyio.fail_after(10):   # the job summarises when the pipeline is idle
            while kb.pipeline.busy or not kb.communities.up_to_date or kb.communities.status.pending:
                await anyio.sleep(0.01)
        form = {**STAGES, "mode": "global", "communities": "on", "hl_keywords": "Acme Corp, Berlin"}
        question = "What is around Acme Corp?"
        page = (await run(client, htmx=True, query=question, **form)).text
        result = await query(client, query=question, **{**form, "hl_keywords": ["Acme Corp", "Berlin"]})
    communities = result["communities"]
    assert communities and all(set(c) == {"title", "summary", "score", "members"} for c in communities)
    assert all(c["title"].startswith("<b>Around ") and c["members"] >= 2 and c["score"] > 0 for c in communities)
    assert channel_counts(page)["communities"] == result["channels"]["communities"]
    assert result["channels"]["communities"]["communities"] == len(communities) == 2   # the budget fits both
    table = must_find(r'<table id="result-communities">.*?</table>', page, re.DOTALL).group(0)
    assert "<b>" not in table and "<script>" not in table and "&lt;b&gt;Around " in table
    assert "&lt;script&gt;x()&lt;/script&gt;" in table
    assert [row[2] for row in cells(page, "result-communities").values()] == [str(c["members"]) for c in communities]
