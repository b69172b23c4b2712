"""Health that tells the truth: ``GET /rag/health`` reports the upstream, the models, the store and
the pipeline (200 when ready, 503 when not), and a background watcher says once, in the log, when
the upstream is unreachable or a model is missing, and once when it is back. ``GET /`` stays
Ollama's banner.

The upstream is the fake Ollama, in-process or on 127.0.0.1; a dead upstream is a closed port.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from proxy.app import Settings, create_app
from proxy.knowledge.service import Knowledge
from proxy.state import Gateway
from proxy.upstream.watch import UpstreamWatcher
from tests.conftest import running
from tests.fake_ollama import FakeOllama
from tests.store_backends import on_both_backends, with_store_setting

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The tests marked ``on_both_backends`` run on both backends (tests/store_backends.py)."""
    return with_store_setting(settings, request)

KEY = "sk-health-SECRET-key-4e1b"
PASSWORD = "pw-health-SECRET-admin-77d0"


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def gateway(settings: Settings, **kwargs) -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    """GraphGate in-process, its lifespan run; its upstream is whatever ``settings`` names (real
    network) unless ``upstream_transport`` is given."""
    app = create_app(settings, **kwargs)
    async with running(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11435") as client:
            yield client, app.state.gateway


def watcher_of(gw: Gateway) -> UpstreamWatcher:
    if gw.watcher is None:
        raise AssertionError("the gateway has no upstream watcher: its lifespan did not run")
    return gw.watcher


def knowledge_of(gw: Gateway) -> Knowledge:
    if gw.knowledge is None:
        raise AssertionError(f"the knowledge store is unavailable: {gw.knowledge_error}")
    return gw.knowledge


async def wait_for(condition, seconds: float = 10.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


def watcher_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "graphgate.upstream" and r.levelno == level]


# --- the report ---


@on_both_backends
async def test_ready_when_the_upstream_has_both_models(client: httpx.AsyncClient, settings: Settings) -> None:
    response = await client.get("/rag/health")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["status"] == "ok" and report["ready"] is True and report["problems"] == []
    upstream = report["upstream"]
    assert upstream["url"] == "http://127.0.0.1:11434"
    assert upstream["reachable"] is True and upstream["version"] == "0.12.3" and upstream["error"] is None
    assert upstream["checked_at"].endswith("Z") and 0 <= upstream["age_seconds"] < 300
    extraction, embedding = report["models"]["extraction"], report["models"]["embedding"]
    # GRAPHGATE_LLM_MODEL unset: the first model with the completion capability is the one chosen
    assert extraction == {"name": "llama3.2:latest", "present": True, "setting": "GRAPHGATE_LLM_MODEL",
                          "chosen": "first model with completion capability"}
    assert embedding["name"] == "nomic-embed-text" and embedding["present"] is True
    store = report["store"]
    assert store["open"] is True and store["error"] is None and store["writable"] is True
    assert store["documents"] == {"pending": 0, "processing": 0, "processed": 0, "failed": 0, "total": 0}
    if settings.store == "embedded":   # the free space of the disk the store is on
        assert store["free_bytes"] > 0
    else:   # a server's store: its disk is not the gateway's to see, the base's schema size is said instead
        assert store["free_bytes"] is None and store["stored_bytes"] > 0
    assert store["unrecorded_failures"] == 0
    assert report["pipeline"] == {"working": False, "queued": 0, "running": 0, "chunks_per_minute": 0}
    # Ollama's own heartbeat is untouched
    assert (await client.get("/")).text == "Ollama is running"
    assert (await client.head("/")).status_code == 200


async def test_documents_and_pipeline_are_counted(client: httpx.AsyncClient, facts) -> None:
    response = await client.post("/rag/documents", json={"name": "a.txt", "text": "Alice met Bob in Paris."})
    assert response.status_code == 202, response.text
    for _ in range(500):
        report = (await client.get("/rag/health")).json()
        # the status is committed a moment before the worker leaves the pipeline's running set
        if report["store"]["documents"]["processed"] == 1 and not report["pipeline"]["working"]:
            break
        await anyio.sleep(0.02)
    assert report["store"]["documents"]["total"] == 1 and report["store"]["documents"]["processed"] == 1
    assert report["pipeline"]["working"] is False


async def test_the_extraction_model_reported_is_the_one_ingestion_chose(
        settings: Settings, fake: FakeOllama, facts) -> None:
    """With GRAPHGATE_LLM_MODEL unset, ingestion keeps the model it chose; a chat model pulled later
    (listed first, as Ollama lists the newest) must not be reported as the one in use."""
    async with gateway(settings, upstream_transport=fake.transport()) as (client, gw):
        response = await client.post("/rag/documents", json={"name": "a.txt", "text": "Alice met Bob in Paris."})
        assert response.status_code == 202
        await wait_for(lambda: knowledge_of(gw).models.chosen_chat_model is not None, what="a chosen model")
        in_use = knowledge_of(gw).models.chosen_chat_model
        assert in_use is not None
        newer = dict(fake.models[in_use], name="newer-chat:latest", model="newer-chat:latest", digest="f" * 64)
        fake.models = {"newer-chat:latest": newer, **fake.models}
        await watcher_of(gw).latest(0)  # a check now, as the watcher's next round would make
        report = (await client.get("/rag/health")).json()
    assert report["models"]["extraction"] == {"name": in_use, "present": True, "setting": "GRAPHGATE_LLM_MODEL",
                                              "chosen": "first model with completion capability"}


async def test_a_missing_embedding_model_is_degraded_but_ready(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    del fake.models["nomic-embed-text:latest"]
    response = await client.get("/rag/health")
    assert response.status_code == 200, response.text  # chats still work: only `ollama pull` fixes this
    report = response.json()
    assert report["status"] == "degraded" and report["ready"] is True
    assert report["problems"] == ["embedding model nomic-embed-text is missing upstream: run "
                                  "`ollama pull nomic-embed-text` or set GRAPHGATE_EMBED_MODEL to a model "
                                  "`ollama list` shows"]
    assert report["models"]["embedding"]["present"] is False
    assert report["models"]["extraction"]["present"] is True


async def test_no_chat_model_upstream_is_named(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    fake.models = {"nomic-embed-text:latest": fake.models["nomic-embed-text:latest"]}
    report = (await client.get("/rag/health")).json()
    assert report["models"]["extraction"]["name"] is None and report["models"]["extraction"]["present"] is False
    [problem] = report["problems"]
    assert "can chat" in problem and "ollama pull llama3.2" in problem and "GRAPHGATE_LLM_MODEL" in problem


async def test_a_configured_extraction_model_that_is_missing(settings: Settings, fake: FakeOllama) -> None:
    async with gateway(settings.replace(llm_model="mistral"), upstream_transport=fake.transport()) as (client, _):
        report = (await client.get("/rag/health")).json()
    assert report["models"]["extraction"] == {"name": "mistral", "present": False, "setting": "GRAPHGATE_LLM_MODEL",
                                              "chosen": "configured"}
    assert report["problems"] == ["extraction model mistral is missing upstream: run `ollama pull mistral` or "
                                  "set GRAPHGATE_LLM_MODEL to a model `ollama list` shows"]


async def test_an_unreachable_upstream_is_503_and_says_so(settings: Settings) -> None:
    port = closed_port()
    # credentials in the upstream URL never show in the (open) report
    async with gateway(settings.replace(upstream=f"http://ollama-user:SECRET-pw@127.0.0.1:{port}")) as (client, _):
        response = await client.get("/rag/health")
        banner = await client.get("/")
    assert response.status_code == 503, response.text
    report = response.json()
    sentence = (f"upstream Ollama at http://127.0.0.1:{port} is unreachable (connection refused): start Ollama "
                "or set GRAPHGATE_UPSTREAM")
    assert report["status"] == "degraded" and report["ready"] is False
    assert report["problems"] == [sentence] and report["error"] == sentence
    assert report["upstream"]["reachable"] is False and report["upstream"]["version"] is None
    assert report["upstream"]["url"] == f"http://127.0.0.1:{port}"
    assert report["models"]["embedding"]["present"] is None  # unknown, not missing
    assert "SECRET" not in response.text and "ollama-user" not in response.text
    assert banner.status_code == 200 and banner.text == "Ollama is running"  # Ollama's, unchanged


async def test_a_store_that_cannot_open_is_503(settings: Settings, fake: FakeOllama, tmp_path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory should be")
    async with gateway(settings.replace(data_dir=blocker / "data"), upstream_transport=fake.transport()) as (client, _):
        response = await client.get("/rag/health")
    assert response.status_code == 503, response.text
    report = response.json()
    assert report["upstream"]["reachable"] is True and report["store"]["open"] is False
    assert report["pipeline"] is None
    [problem] = report["problems"]
    assert problem.startswith("the knowledge store is unavailable (") and "GRAPHGATE_DATA_DIR" in problem


async def test_health_requests_share_one_recent_check(client: httpx.AsyncClient, fake: FakeOllama) -> None:
    responses = await _gather([client.get("/rag/health") for _ in range(8)])
    assert all(r.status_code == 200 for r in responses)
    for _ in range(5):
        assert (await client.get("/rag/health")).status_code == 200
    assert len(fake.requests_to("/api/version")) == 1  # the upstream is asked once, not per request
    assert len(fake.requests_to("/api/tags")) == 1


@pytest.mark.parametrize("hung", ["/api/version", "/api/tags"])
async def test_a_hung_upstream_costs_concurrent_health_requests_one_timeout(
        settings: Settings, fake: FakeOllama, hung: str) -> None:
    """An upstream that accepts and never answers: five health requests at once wait for one check,
    bounded as a whole by the discovery timeout, not five checks one after another."""
    fake.hang_paths.add(hung)
    async with gateway(settings.replace(discovery_timeout=0.5), upstream_transport=fake.transport()) as (client, _):
        responses = await _gather([client.get("/rag/health") for _ in range(5)])
    assert len(fake.requests_to(hung)) == 1  # one check for all five (it was one each, one after another)
    if hung == "/api/version":
        assert all(r.status_code == 503 for r in responses)
        assert "did not answer (no answer within 0.5 s)" in responses[0].json()["error"]
    else:
        assert all(r.status_code == 200 for r in responses)
        assert "could not be listed (no answer within 0.5 s)" in responses[0].json()["problems"][0]


async def _gather(calls: list) -> list:
    results: list = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]

    async with anyio.create_task_group() as group:
        for i in range(len(calls)):
            group.start_soon(one, i)
    return results


# --- who may call it ---


@pytest.mark.parametrize("password", [None, PASSWORD])
async def test_open_without_the_api_key_and_shows_no_secret(settings: Settings, fake: FakeOllama,
                                                            password: str | None) -> None:
    keyed = settings.replace(api_key=KEY, admin_password=password)
    async with gateway(keyed, upstream_transport=fake.transport()) as (client, _):
        response = await client.get("/rag/health")
        head = await client.head("/rag/health")
        stats = await client.get("/rag/stats")
        post = await client.post("/rag/health", json={})
        foreign = await client.get("/rag/health", headers={"origin": "https://evil.example"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ok"
    assert head.status_code == 200 and head.content == b""
    assert KEY not in response.text and PASSWORD not in response.text
    assert stats.status_code == 401  # the rest of /rag still needs the key
    assert post.status_code == 401   # only GET and HEAD are open
    assert foreign.status_code == 403  # CORS still comes first: a page elsewhere cannot read it


# --- the console shows the same state ---


async def test_the_dashboard_health_fragment_names_the_missing_model(client: httpx.AsyncClient,
                                                                     fake: FakeOllama) -> None:
    del fake.models["nomic-embed-text:latest"]
    response = await client.get("/admin/fragments/health")
    assert response.status_code == 200
    assert "Upstream http://127.0.0.1:11434 is up (Ollama 0.12.3" in response.text
    assert "embedding model nomic-embed-text is missing upstream" in response.text
    assert "<strong>llama3.2:latest</strong>" in response.text


# --- the watcher ---


async def test_the_watcher_warns_once_while_the_upstream_is_dead_and_once_when_it_is_back(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="graphgate.upstream")
    port = closed_port()
    async with gateway(settings.replace(upstream=f"http://127.0.0.1:{port}"), watch_seconds=0.05) as (client, gw):
        await wait_for(lambda: watcher_of(gw).checks >= 5, what="five checks of the dead upstream")
        warnings = watcher_records(caplog, logging.WARNING)
        assert warnings == [f"upstream Ollama at http://127.0.0.1:{port} is unreachable (connection refused): "
                            "start Ollama or set GRAPHGATE_UPSTREAM"]
        assert watcher_records(caplog, logging.INFO) == []
        fake = FakeOllama()
        with fake.serve(port=port):
            await wait_for(lambda: watcher_records(caplog, logging.INFO), what="the upstream coming back")
            back = watcher_of(gw).checks
            await wait_for(lambda: watcher_of(gw).checks >= back + 5, what="five more checks")
            assert watcher_records(caplog, logging.INFO) == [
                f"upstream Ollama at http://127.0.0.1:{port} is reachable again (version 0.12.3)"]
            assert len(watcher_records(caplog, logging.WARNING)) == 1
            assert (await client.get("/rag/health")).status_code == 200


async def test_the_watcher_warns_once_about_a_missing_model_and_once_when_it_appears(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="graphgate.upstream")
    fake = FakeOllama()
    embedder = fake.models.pop("nomic-embed-text:latest")
    with fake.serve() as url:
        async with gateway(settings.replace(upstream=url), watch_seconds=0.05) as (_, gw):
            await wait_for(lambda: watcher_of(gw).checks >= 5, what="five checks")
            assert watcher_records(caplog, logging.WARNING) == [
                "embedding model nomic-embed-text is missing upstream: run `ollama pull nomic-embed-text` or set "
                "GRAPHGATE_EMBED_MODEL to a model `ollama list` shows"]
            assert watcher_records(caplog, logging.INFO) == [  # start-up names what it found
                f"upstream Ollama at {url} is reachable (version 0.12.3); extraction model llama3.2:latest"]
            fake.models["nomic-embed-text:latest"] = embedder  # `ollama pull nomic-embed-text`
            await wait_for(lambda: len(watcher_records(caplog, logging.INFO)) == 2, what="the model appearing")
            seen = watcher_of(gw).checks
            await wait_for(lambda: watcher_of(gw).checks >= seen + 5, what="five more checks")
            assert (watcher_records(caplog, logging.INFO)[1]
                    == "embedding model nomic-embed-text is now available upstream")
            assert len(watcher_records(caplog, logging.INFO)) == 2
            assert len(watcher_records(caplog, logging.WARNING)) == 1


async def test_shutdown_cancels_a_check_the_upstream_never_answers(settings: Settings) -> None:
    fake = FakeOllama()
    fake.hang_paths.add("/api/version")
    discovery = 120.0   # a shutdown that waited for the check's own timeout would take this long
    with fake.serve() as url:
        app = create_app(settings.replace(upstream=url, discovery_timeout=discovery), watch_seconds=0.05)
        with anyio.fail_after(discovery / 2):   # only ends a shutdown that waits for the check
            async with running(app):
                await wait_for(lambda: fake.hangs, what="the first check")
        # the check was abandoned by the shutdown: the upstream saw its client leave, not time out
        await wait_for(lambda: all(hang.ended is not None for hang in fake.hangs), seconds=discovery / 2,
                       what="the hung check to be left")
        assert all(hang.ended - hang.started < discovery for hang in fake.hangs if hang.ended is not None)
