"""A context budget is a ceiling on every surface (issue 30, item 2): ``max_total_tokens: 1000`` gave
8,291 tokens on /rag/query, the MCP ``query`` tool and ``graphgate query`` (the entity and relation
sections kept their own ceilings of 6,000 and 8,000). Here a gateway on a real uvicorn, over the fake
Ollama, holds a corpus whose unbounded context is far larger than the budgets tried; on each surface
the context, counted with the project's tokenizer, never exceeds the budget: /rag/query (both
layouts, with and without a window), the MCP tool, ``graphgate query`` against the running gateway,
and the chat path (/api/chat with several windows and /v1/chat/completions under the setting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from proxy.app import create_app
from proxy.core.settings import Settings
from proxy.core.tokens import get_tokenizer
from proxy.retrieval.budget import plan_budget
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread
from tests.mcp_helpers import http_session, structured, wait_processed

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
SETTING = 1000            # the gateway's GRAPHGATE_MAX_TOTAL_TOKENS
BUDGETS = (300, 1000, 2500, 5000)
QUESTION = "Who works at Orbanex Labs, and on which projects?"
MODEL = "llama3.2:latest"

COMPANIES = ("Orbanex Labs", "Kestrel Dynamics", "Morrow Foods", "Tallis Bank", "Quillon Works", "Harrow Freight",
             "Lumen Health", "Tessel Media")
CITIES = ("Lisbon", "Tallinn", "Porto", "Ghent")
PROJECTS = ("Vireo", "Quarry", "Lantern", "Saffron", "Bellwether", "Marigold")
PEOPLE = tuple(f"{first} {last}" for first in ("Ana", "Bruno", "Clara", "Dmitri", "Elif", "Farah", "Goran")
               for last in ("Novak", "Ortega", "Petrov"))
ENTITIES = {**dict.fromkeys(COMPANIES, "Organization"), **dict.fromkeys(CITIES, "Location"),
            **dict.fromkeys(PROJECTS, "Artifact"), **dict.fromkeys(PEOPLE, "Person")}


def company_document(index: int, company: str) -> str:
    """A page about ``company``: who works there, on what, where; long sentences, many relations."""
    city = CITIES[index % len(CITIES)]
    lines = [f"# {company}", "", f"{company} is headquartered in {city}, where it has grown steadily for a decade "
             "and where most of its engineering, finance and operations staff work together."]
    for n, person in enumerate(PEOPLE):
        if (n + index) % 2:
            continue
        project = PROJECTS[(n + index) % len(PROJECTS)]
        lines.append(f"{person} works at {company} on the {project} project, reviewing its budget every quarter, "
                     f"mentoring new colleagues and writing the project's yearly report for the board.")
        lines.append(f"{person} moved to {city} to join {company} and still travels often for {project}.")
    return "\n".join(lines)


def count(text: str) -> int:
    return get_tokenizer().count(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One gateway (GRAPHGATE_MAX_TOTAL_TOKENS=1000) with the corpus processed, its fake upstream."""
    fake = FakeOllama()
    fake.structured = KnownFacts(ENTITIES)
    data_dir = tmp_path_factory.mktemp("budget") / "data"
    settings = Settings.load(environ={"GRAPHGATE_UPSTREAM": "http://127.0.0.1:9", "GRAPHGATE_DATA_DIR": str(data_dir),
                                      "GRAPHGATE_KEYWORD_BUDGET": "30", "GRAPHGATE_MAX_TOTAL_TOKENS": str(SETTING),
                                      "GRAPHGATE_CHUNK_TOKENS": "300", "GRAPHGATE_GLEANING": "0"})
    with fake.serve() as upstream, serve_in_thread(create_app(settings.replace(upstream=upstream))) as url:
        ids = []
        for index, company in enumerate(COMPANIES):
            response = httpx.post(f"{url}/rag/documents", json={"name": f"{company}.md",
                                                                "text": company_document(index, company)})
            ids.append(response.json()["documents"][0]["id"])
        wait_processed(url, ids, {})
        yield {"url": url, "fake": fake, "data_dir": data_dir}


def rag_query(world: dict[str, Any], **body: Any) -> dict[str, Any]:
    response = httpx.post(world["url"] + "/rag/query", json={"query": QUESTION, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_plan_scales_the_sections_into_the_total() -> None:
    """The one plan of every surface: below the sections' ceilings, they take at most half the total."""
    for total in (100, 1000, 2500, 30000):
        budget = plan_budget(max_total=total, max_entity=6000, max_relation=8000)
        assert budget.total == total and budget.entity + budget.relation <= total // 2 + 1
        assert budget.relation > budget.entity   # each keeps its share of the two
    assert plan_budget(max_total=30000, max_entity=6000, max_relation=8000).entity == 6000   # the defaults fit
    windowed = plan_budget(max_total=1000, max_entity=6000, max_relation=8000, window=2048, source="request",
                           conversation=100, reserve=1024)
    assert windowed.total == 2048 - 100 - 1024 - 64 and windowed.entity + windowed.relation <= windowed.total // 2 + 1


@pytest.mark.parametrize("layout", ["evidence", "sections"])
def test_rag_query_never_exceeds_max_total_tokens(world: dict[str, Any], layout: str) -> None:
    unbounded = rag_query(world, context_layout=layout, max_total_tokens=30000)
    # the budgets below bind (how much the evidence layout gathers unbounded depends on the order in which the
    # documents finished: ~11k tokens here, 9.8k on a busy CI machine; the claim is only that it exceeds them)
    assert count(unbounded["context"]) > max(BUDGETS) + 1000
    for budget in BUDGETS:
        result = rag_query(world, context_layout=layout, max_total_tokens=budget)
        assert 0 < count(result["context"]) <= budget, (budget, result["tokens"])
        assert result["tokens"]["total"] <= budget
        if budget >= 1000:   # room for facts and passages, and the references the passages cite
            assert result["chunks"] and (result["relations"] or result["entities"]), budget
            assert "## References\n[1] " in result["context"]
    # the gateway's own setting is a ceiling too
    assert count(rag_query(world, context_layout=layout)["context"]) <= SETTING


def test_rag_query_under_a_window_and_a_budget_takes_the_smaller(world: dict[str, Any]) -> None:
    for num_ctx, budget in ((2048, 30000), (8192, 700), (3000, 1500)):
        result = rag_query(world, num_ctx=num_ctx, max_total_tokens=budget)
        planned = result["budget"]["total"]
        assert planned == min(budget, num_ctx - result["budget"]["conversation"] - 1024 - 64)
        assert 0 < count(result["context"]) <= planned


def test_a_budget_smaller_than_the_instructions_gives_nothing_and_says_why(world: dict[str, Any]) -> None:
    result = rag_query(world, max_total_tokens=100)   # the knob's least; the instructions alone are ~115
    assert result["context"] == "" and not result["chunks"] and not result["relations"]
    assert "cannot hold the instructions" in result["skipped"]


async def test_the_mcp_query_tool_never_exceeds_its_budget(world: dict[str, Any]) -> None:
    async with http_session(world["url"]) as client:
        default = structured(await client.call_tool("query", {"question": QUESTION}))
        assert 0 < count(default["context"]) <= SETTING   # the gateway's setting
        for budget in BUDGETS:
            result = structured(await client.call_tool("query", {"question": QUESTION, "max_total_tokens": budget}))
            assert 0 < count(result["context"]) <= budget, budget
            assert result["chunks"]


def test_graphgate_query_never_exceeds_the_budget_it_is_given(world: dict[str, Any]) -> None:
    """``graphgate query`` against the running gateway: its --max-total-tokens goes with the query
    (before, only an in-process store saw the flag); without it the gateway's setting holds."""
    port = str(urlsplit(world["url"]).port)
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": "", "GRAPHGATE_PORT": port, "PYTHONPATH": str(ROOT),
           "GRAPHGATE_DATA_DIR": str(world["data_dir"])}
    env.pop("GRAPHGATE_MAX_TOTAL_TOKENS", None)
    for budget in (None, 300, 2500):
        flags = [] if budget is None else ["--max-total-tokens", str(budget)]
        done = subprocess.run([sys.executable, "-m", "proxy", "query", QUESTION, "--json", *flags],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
        assert done.returncode == 0, done.stderr
        assert "using the gateway at" in done.stderr   # the running gateway answered, not a store of its own
        result = json.loads(done.stdout)
        assert 0 < count(result["context"]) <= (budget or SETTING), budget


def injected(world: dict[str, Any], path: str) -> str:
    """The system message GraphGate put in front of the last chat the upstream received."""
    sent = world["fake"].requests_to(path)[-1].json["messages"]
    assert sent[0]["role"] == "system", sent
    return str(sent[0]["content"])


def test_a_chat_turn_never_exceeds_the_setting_or_its_window(world: dict[str, Any]) -> None:
    url = world["url"]
    turn = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "stream": False}
    assert httpx.post(url + "/api/chat", json=turn, timeout=60).status_code == 200
    assert 0 < count(injected(world, "/api/chat")) <= SETTING
    assert httpx.post(url + "/v1/chat/completions", json=turn, timeout=60).status_code == 200
    assert 0 < count(injected(world, "/v1/chat/completions")) <= SETTING
    for num_ctx in (1400, 1700, 2000):   # a window smaller than the setting lowers the total
        body = {**turn, "options": {"num_ctx": num_ctx}}
        assert httpx.post(url + "/api/chat", json=body, timeout=60).status_code == 200
        block = injected(world, "/api/chat")
        planned = traced_budget(url, num_ctx)
        assert planned["total"] < SETTING
        assert 0 < count(block) <= planned["total"], (num_ctx, planned)
        assert count(block) + planned["conversation"] + planned["reserve"] <= num_ctx


def traced(url: str, window: int) -> dict[str, Any]:
    """The trace of the turn with this window (written in the background)."""
    for _ in range(200):
        for trace in httpx.get(url + "/rag/traces").json()["traces"]:
            if ((trace.get("detail") or {}).get("budget") or {}).get("window") == window:
                return dict(trace)
        time.sleep(0.05)
    raise AssertionError(f"no trace of the turn with a {window}-token window")


def traced_budget(url: str, window: int) -> dict[str, Any]:
    return dict(traced(url, window)["detail"]["budget"])


def test_a_window_too_small_for_the_instructions_is_forwarded_and_traced_with_why(world: dict[str, Any]) -> None:
    chats = len(world["fake"].requests_to("/api/chat"))
    turn = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "stream": False,
            "options": {"num_ctx": 1024 + 64 + 60}}   # what the question leaves is less than the instructions
    assert httpx.post(world["url"] + "/api/chat", json=turn, timeout=60).status_code == 200
    assert world["fake"].requests_to("/api/chat")[chats:][-1].json["messages"] == turn["messages"]   # as sent
    trace = traced(world["url"], 1024 + 64 + 60)
    assert not trace["augmented"] and "cannot hold the instructions" in trace["reason"]



def test_a_long_messages_count_is_remembered_without_keeping_its_text() -> None:
    """A pasted document comes back in every later turn of its conversation: its count is kept by
    length and hash, so the next turn counts it without tokenising (and on the event loop)."""
    tokenizer = get_tokenizer()
    pasted = "Section after section of the quarterly report, with figures. " * 2000 + str(time.time_ns())
    assert tokenizer.counted(pasted) is None and tokenizer.uncounted_chars([pasted, "short"]) == len(pasted) + 5
    count = tokenizer.count(pasted)
    assert count == len(tokenizer.encode(pasted))
    assert tokenizer.counted(pasted) == count and tokenizer.uncounted_chars([pasted]) == 0
    assert tokenizer.counted(pasted[:-1] + "!") is None   # another text of the same length
    assert pasted not in tokenizer._counts   # its text is not kept
