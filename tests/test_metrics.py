"""GET /metrics, read with prometheus_client's own parser: each metric moves when its event
happens (an ingest, a query, an augmented or skipped chat turn, an upstream error), the key guard
when GRAPHGATE_METRICS_REQUIRE_KEY is on, and an answer even when the store could not open."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from proxy.core.settings import Settings
from proxy.monitoring.reasons import reason_label
from tests.background import background_written
from tests.chat_helpers import MODEL, body, ingest
from tests.conftest import NOMINAL_UPSTREAM, gateway_client
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import query, settle, upload

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
RERANK_URL = "http://rerank.test"  # in-process the fake upstream's transport serves it too


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_an_ingest_moves_the_counts_and_the_freshness(settings: Settings, fake: FakeOllama,
                                                            facts: KnownFacts) -> None:
    fake.hold_structured = anyio.Event()   # extraction waits: the document stays unsearchable
    async with gateway_client(settings, fake) as client:
        before = await scrape(client)
        assert value(before, "graphgate_store_up", kb="default") == 1
        assert [value(before, "graphgate_documents", kb="default", status=s)
                for s in ("pending", "processing", "processed")] == [0, 0, 0]
        assert value(before, "graphgate_entities", kb="default") == value(before, "graphgate_chunks", kb="default") == 0
        assert value(before, "graphgate_index_freshness_seconds", kb="default") == 0

        document = await upload(client, "team.txt", TEAM)
        await anyio.sleep(1.1)   # the freshness is at least this old
        with anyio.fail_after(30):   # and the extraction call is out, held by the fake
            while "extract" not in facts.calls:
                await anyio.sleep(0.01)
        held = await scrape(client)
        assert value(held, "graphgate_documents", kb="default", status="pending") + value(
            held, "graphgate_documents", kb="default", status="processing") == 1
        assert value(held, "graphgate_index_freshness_seconds", kb="default") >= 1.0
        assert value(held, "graphgate_pipeline_documents", kb="default", state="extracting") == 1
        assert value(held, "graphgate_llm_slots_busy", model="chat") >= 1   # the held extraction call
        assert value(held, "graphgate_llm_slots", model="chat") == settings.llm_concurrency

        fake.hold_structured.set()
        assert (await settle(client, document["id"]))["status"] == "processed"
        after = await scrape(client)
    assert value(after, "graphgate_documents", kb="default", status="processed") == 1
    assert value(after, "graphgate_documents", kb="default", status="pending") == value(
        after, "graphgate_documents", kb="default", status="processing") == 0
    assert value(after, "graphgate_index_freshness_seconds", kb="default") == 0
    assert value(after, "graphgate_chunks", kb="default") >= 1
    assert value(after, "graphgate_entities", kb="default") >= 3
    assert value(after, "graphgate_relations", kb="default") >= 2
    assert value(after, "graphgate_pipeline_documents", kb="default", state="extracting") == 0
    assert value(after, "graphgate_llm_slots_busy", model="chat") == 0
    assert value(after, "graphgate_upstream_requests_total", kb="default", kind="extraction",
                 upstream=NOMINAL_UPSTREAM) >= 1
    assert value(after, "graphgate_upstream_requests_total", kb="default", kind="embedding",
                 upstream=NOMINAL_UPSTREAM) >= 1
    assert value(after, "graphgate_upstream_errors_total", kb="default", kind="extraction",
                 upstream=NOMINAL_UPSTREAM) == 0


async def test_a_query_and_an_augmented_chat_fill_the_latency_histograms(settings: Settings, fake: FakeOllama,
                                                                        facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        before = await scrape(client)
        await query(client, query="Who works at Acme Corp?", mode="local")
        chat = await client.post("/api/chat", json=body("Where is Acme Corp?"))
        assert chat.status_code == 200, chat.text
        after = await scrape(client)

    def moved(name: str, **labels: str) -> float:   # a mode's series appear with its first retrieval
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    assert moved("graphgate_query_duration_seconds_count", kb="default", mode="local") == 1
    assert moved("graphgate_query_duration_seconds_count", kb="default", mode=settings.mode) == 1   # the chat turn
    assert moved("graphgate_query_duration_seconds_sum", kb="default", mode="local") > 0
    for mode in ("local", settings.mode):
        for stage in ("queued", "linking", "embedding", "keywords", "search", "fusion", "chunks", "context"):
            assert moved("graphgate_query_stage_duration_seconds_count", kb="default", mode=mode,
                         stage=stage) == 1, (mode, stage)
        for stage in ("rerank", "filter"):   # no reranker set, no metadata filter given
            assert moved("graphgate_query_stage_duration_seconds_count", kb="default", mode=mode,
                         stage=stage) == 0, (mode, stage)
    assert moved("graphgate_chat_turns_augmented_total", kb="default") == 1
    assert moved("graphgate_chat_added_ttfb_seconds_count") == 1
    assert moved("graphgate_upstream_requests_total", kb="default", kind="chat_relay", upstream=NOMINAL_UPSTREAM) == 1
    assert moved("graphgate_upstream_request_duration_seconds_count", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 1
    assert moved("graphgate_upstream_requests_total", kb="default", kind="keywords", upstream=NOMINAL_UPSTREAM) >= 1
    assert moved("graphgate_upstream_errors_total", kb="default", kind="chat_relay", upstream=NOMINAL_UPSTREAM) == 0


async def test_a_reranking_fills_the_rerank_histogram(settings: Settings, fake: FakeOllama,
                                                      facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(rerank_url=RERANK_URL), fake) as client:
        await ingest(client)
        await query(client, query="Who works at Acme Corp?", mode="mix")
        samples = await scrape(client)
    assert value(samples, "graphgate_rerank_duration_seconds_count") == 1
    assert value(samples, "graphgate_query_stage_duration_seconds_count", kb="default", mode="mix", stage="rerank") == 1


async def test_skipped_turns_are_counted_by_reason(client: httpx.AsyncClient) -> None:
    assistant_last = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    sent = [
        client.post("/api/chat", json=body("Who works at Acme Corp?")),   # nothing ingested yet
        client.post("/api/chat", json=body("/bypass Who works at Acme Corp?")),
        client.post("/api/chat", json={"model": MODEL, "messages": assistant_last, "stream": False}),
        client.post("/v1/chat/completions", json=body(), headers={"x-task": "title_generation"}),
    ]
    for request in sent:
        assert (await request).status_code == 200
    samples = await scrape(client)
    for reason in ("empty_knowledge_base", "bypass", "continuation", "background_task"):
        assert value(samples, "graphgate_chat_turns_skipped_total", kb="default", reason=reason) == 1, reason
    assert value(samples, "graphgate_chat_turns_skipped_total", kb="default", reason="other") == 0
    assert value(samples, "graphgate_chat_turns_augmented_total", kb="default") == 0
    assert value(samples, "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 4


@pytest.mark.parametrize(("reason", "label"), [
    ("background task (title, recognised by its template)", "background_task"),
    ("model 'nomic-embed-text:latest' cannot chat (capabilities: embedding)", "model_cannot_chat"),
    ("/api/show failed for model 'x': upstream Ollama at http://h timed out", "model_info_failed"),
    ("the conversation (9000 tokens) and the answer reserve (1024) leave no room in the 4096-token window",
     "window_full"),
    ("retrieval failed: UpstreamUnavailable", "retrieval_failed"),
    ("nothing relevant found", "nothing_relevant"),
    ("no searchable document matches the filter", "filter_matched_nothing"),
    ("something new", "other"),
    (None, "other"),
])
def test_a_reason_sentence_becomes_a_label(reason: str | None, label: str) -> None:
    assert reason_label(reason) == label


async def test_upstream_errors_are_counted_by_kind(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    fake.fail_paths["/api/embed"] = 500
    async with gateway_client(settings.replace(llm_retries=1), fake) as client:
        failed = await client.post("/api/chat", json={**body(), "model": "fail-500"})
        assert failed.status_code == 500
        document = await upload(client, "team.txt", TEAM)
        assert (await settle(client, document["id"]))["status"] == "failed"
        samples = await scrape(client)
    assert value(samples, "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 1
    assert value(samples, "graphgate_upstream_errors_total", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 1
    assert value(samples, "graphgate_upstream_errors_total", kb="default", kind="embedding",
                 upstream=NOMINAL_UPSTREAM) >= 1
    assert value(samples, "graphgate_upstream_errors_total", kb="default", kind="extraction",
                 upstream=NOMINAL_UPSTREAM) == 0
    assert value(samples, "graphgate_documents", kb="default", status="failed") == 1


async def test_the_key_is_required_only_when_the_setting_says_so(settings: Settings, fake: FakeOllama) -> None:
    keyed = settings.replace(api_key="s3cret")
    async with gateway_client(keyed, fake) as client:
        assert (await client.get("/metrics")).status_code == 200   # the default: a scrape job has no key
    async with gateway_client(keyed.replace(metrics_require_key=True), fake) as client:
        refused = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"authorization": "Bearer nope"})
        allowed = await client.get("/metrics", headers={"authorization": "Bearer s3cret"})
    assert refused.status_code == wrong.status_code == 401
    assert refused.json() == {"error": "unauthorized: a valid API key is required (Authorization: Bearer <key>)"}
    assert refused.headers["www-authenticate"] == "Bearer"
    assert allowed.status_code == 200 and 'graphgate_store_up{kb="default"} 1.0' in allowed.text


async def test_without_a_store_the_gateway_metrics_still_answer(settings: Settings, fake: FakeOllama,
                                                                tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory should be")
    async with gateway_client(settings.replace(data_dir=blocker / "data"), fake) as client:
        assert (await client.post("/api/chat", json=body())).status_code == 200
        samples = await scrape(client)
    assert value(samples, "graphgate_store_up", kb="default") == 0
    assert not any(name in ("graphgate_entities", "graphgate_documents", "graphgate_index_freshness_seconds")
                   for name, _ in samples)
    assert value(samples, "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 1
    assert value(samples, "graphgate_chat_added_ttfb_seconds_count") == 1


async def test_each_app_counts_for_itself(settings: Settings, fake: FakeOllama, tmp_path: Path) -> None:
    async with gateway_client(settings, fake) as one, \
            gateway_client(settings.replace(data_dir=tmp_path / "other"), fake) as other:
        assert (await one.post("/api/chat", json=body())).status_code == 200
        assert value(await scrape(one), "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                     upstream=NOMINAL_UPSTREAM) == 1
        assert value(await scrape(other), "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                     upstream=NOMINAL_UPSTREAM) == 0


async def test_a_filtered_query_times_its_filter_stage(settings: Settings, fake: FakeOllama,
                                                       facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        before = await scrape(client)
        await query(client, query="Who works at Acme Corp?", mode="local", filters={"$document": "team.txt"})
        after = await scrape(client)
    key = ("graphgate_query_stage_duration_seconds_count",
           (("kb", "default"), ("mode", "local"), ("stage", "filter")))
    assert after[key] - before.get(key, 0.0) == 1


async def test_completions_and_cache_misses_are_relays_too(settings: Settings, fake: FakeOllama,
                                                           facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(answer_cache=True), fake) as client:
        await ingest(client)
        generated = await client.post("/api/generate", json={"model": MODEL, "prompt": "hi", "stream": False})
        first = await client.post("/api/chat", json=body("Who works at Acme Corp?"))   # augmented, cache miss
        await background_written()   # the answer is cached in the background
        again = await client.post("/api/chat", json=body("Who works at Acme Corp?"))   # the cached answer
        assert generated.status_code == first.status_code == again.status_code == 200
        assert again.headers.get("x-graphgate-cache") == "hit"
        samples = await scrape(client)
    assert value(samples, "graphgate_upstream_requests_total", kb="default", kind="chat_relay",
                 upstream=NOMINAL_UPSTREAM) == 2
    assert value(samples, "graphgate_chat_added_ttfb_seconds_count") == 1   # /api/generate's


async def test_a_chat_whose_filter_matches_nothing_is_skipped_and_no_query_latency(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        before = await scrape(client)
        chat = await client.post("/api/chat", json=body("Who works at Acme Corp?"),
                                 headers={"X-GraphGate-Filter": '{"category": "none"}'})
        assert chat.status_code == 200
        await background_written()   # the trace, which the counters follow, is kept in the background
        after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("graphgate_chat_turns_skipped_total", kb="default", reason="filter_matched_nothing") == 1
    assert moved("graphgate_query_stage_duration_seconds_count", kb="default", mode=settings.mode, stage="filter") == 1
    assert moved("graphgate_query_duration_seconds_count", kb="default", mode=settings.mode) == 0  # ended at its filter
