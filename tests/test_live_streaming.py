"""Streaming behaviour over real sockets: GraphGate and the fake upstream on real uvicorn servers."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from proxy.app import Settings, create_app
from tests.fake_ollama import FakeOllama
from tests.live import serve_in_thread


def chat(model: str = "llama3.2:latest", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}


# checklist 12
def test_12_lines_arrive_as_the_upstream_sends_them(fake: FakeOllama, live_gateway: str) -> None:
    fake.chunk_delay = 1.0
    fake.reply = ["one", " two"]
    arrivals: list[float] = []
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        with client.stream("POST", "/api/chat", json=chat()) as response:
            assert response.headers["x-accel-buffering"] == "no"
            for line in response.iter_lines():
                if line:
                    arrivals.append(time.monotonic())
                    json.loads(line)
    assert len(arrivals) == 3
    assert arrivals[-1] - arrivals[0] >= 0.8


def upstream_stream_ended(fake: FakeOllama, within: float) -> None:
    """Waits for the upstream's stream to end; ``within`` is shorter than the stream would run on its
    own, so an end seen in time is the gateway leaving it (how soon after the client left is timed by
    bench/reaction_times.py)."""
    deadline = time.monotonic() + within
    while not (fake.stream_events and fake.stream_events[-1].ended is not None):
        assert time.monotonic() < deadline, "the upstream stream ran on after the client left"
        time.sleep(0.02)


# checklist 37
def test_37_client_disconnect_cancels_the_upstream(fake: FakeOllama, live_gateway: str) -> None:
    fake.chunk_delay = 0.5
    fake.reply = [f"w{i} " for i in range(200)]   # 100 s on its own
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        with client.stream("POST", "/api/chat", json=chat()) as response:
            lines = response.iter_lines()
            next(lines)
            next(lines)
    upstream_stream_ended(fake, within=60)
    event = fake.stream_events[-1]
    assert event.completed is False
    assert event.sent < len(fake.reply), "the upstream sent its whole answer"


def test_client_disconnect_while_upstream_is_silent(fake: FakeOllama, live_gateway: str) -> None:
    """Even with no bytes flowing, a departed client closes the upstream request."""
    fake.chunk_delay = 30.0
    fake.reply = ["a", "b"]
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        with client.stream("POST", "/api/chat", json=chat()) as response:
            next(response.iter_lines())
    upstream_stream_ended(fake, within=20)   # its second line would come after 30 s
    assert fake.stream_events[-1].completed is False


# checklist 38
def test_38_concurrent_streams_never_mix(fake: FakeOllama, live_gateway: str) -> None:
    fake.chunk_delay = 0.05
    fake.reply = [f"p{i} " for i in range(15)]
    models = ["llama3.2:latest", "qwen3:latest"] * 4
    results: dict[int, list[dict]] = {}

    def run(i: int, model: str) -> None:
        with httpx.Client(base_url=live_gateway, timeout=30) as client:
            response = client.post("/api/chat", json=chat(model))
            results[i] = [json.loads(line) for line in response.text.splitlines()]

    threads = [threading.Thread(target=run, args=(i, m)) for i, m in enumerate(models)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == len(models)
    for i, model in enumerate(models):
        lines = results[i]
        assert {line["model"] for line in lines} == {model}
        assert "".join(line["message"]["content"] for line in lines) == "".join(fake.reply)
        assert lines[-1]["done"] is True


def test_upstream_dropping_the_connection_midstream_ends_with_one_error_line(
        fake: FakeOllama, live_gateway: str) -> None:
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        response = client.post("/api/chat", json=chat("disconnect"))
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) >= 2
    assert lines[-1].keys() == {"error"}
    assert "upstream Ollama" in lines[-1]["error"]
    assert not any(line.get("done") for line in lines)
    assert response.text.endswith("\n")


def test_upstream_dropping_an_sse_stream_ends_with_an_error_event(fake: FakeOllama, live_gateway: str) -> None:
    with httpx.Client(base_url=live_gateway, timeout=30) as client:
        response = client.post("/v1/chat/completions", json=chat("disconnect", stream=True))
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1].startswith("data: ")
    assert json.loads(events[-1][6:])["error"]["message"]


def test_silent_upstream_gives_504(fake: FakeOllama, settings: Settings, live_upstream: str) -> None:
    app = create_app(settings.replace(upstream=live_upstream, read_timeout=0.5))
    # the upstream never answers: the client's 30 s would end a gateway that waited past its read timeout
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/api/chat", json=chat("hang"))
    assert response.status_code == 504
    assert response.json()["error"].startswith(f"upstream Ollama at {live_upstream} timed out")


def test_slow_first_byte_within_read_timeout_is_fine(fake: FakeOllama, settings: Settings,
                                                     live_upstream: str) -> None:
    app = create_app(settings.replace(upstream=live_upstream, read_timeout=10))   # its first byte after 1 s
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/api/chat", json=chat("slow-first", stream=False))
    assert response.status_code == 200
    assert response.json()["message"]["content"] == "".join(fake.reply)


def test_long_stream_is_not_cut_by_read_timeout(fake: FakeOllama, settings: Settings, live_upstream: str) -> None:
    """No total timeout on streams: 3 s of streaming with a 1.5 s read timeout completes (a line every
    0.1 s: a loaded machine may delay one by a second without reaching the read timeout)."""
    fake.chunk_delay = 0.1
    fake.reply = [f"t{i}" for i in range(31)]
    app = create_app(settings.replace(upstream=live_upstream, read_timeout=1.5))
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        lines = client.post("/api/chat", json=chat()).text.splitlines()
    assert json.loads(lines[-1])["done"] is True


@pytest.mark.parametrize("path", ["/api/version", "/api/tags"])
def test_upstream_down_before_start(settings: Settings, path: str) -> None:
    app = create_app(settings.replace(upstream="http://127.0.0.1:9"))
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/").text == "Ollama is running"
        response = client.get(path)
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("application/json")
    assert "unreachable" in response.json()["error"]
