"""The official ollama Python client, through GraphGate, gets validated objects for every call."""

from __future__ import annotations

import ollama
import pytest

from tests.fake_ollama import FakeOllama

MODEL = "llama3.2:latest"


@pytest.fixture
def client(live_gateway: str) -> ollama.Client:
    return ollama.Client(host=live_gateway)


def test_chat_not_streamed(client: ollama.Client, fake: FakeOllama) -> None:
    reply = client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert isinstance(reply, ollama.ChatResponse)
    assert reply.message.role == "assistant"
    assert reply.message.content == "".join(fake.reply)
    assert reply.done and reply.eval_count and reply.total_duration


def test_chat_streamed(client: ollama.Client, fake: FakeOllama) -> None:
    parts = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True))
    assert all(isinstance(p, ollama.ChatResponse) for p in parts)
    assert "".join(p.message.content or "" for p in parts) == "".join(fake.reply)
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_chat_with_tools_and_thinking(client: ollama.Client) -> None:
    def get_weather(city: str) -> str:
        """Weather for a city.

        Args:
          city: the city
        """
        return "sunny"

    reply = client.chat(model="qwen3:latest", messages=[{"role": "user", "content": "weather?"}],
                        tools=[get_weather], think=True)
    assert reply.message.thinking
    assert reply.message.tool_calls and reply.message.tool_calls[0].function.name == "get_weather"
    assert isinstance(reply.message.tool_calls[0].function.arguments, dict)


def test_generate(client: ollama.Client, fake: FakeOllama) -> None:
    reply = client.generate(model=MODEL, prompt="hi")
    assert isinstance(reply, ollama.GenerateResponse)
    assert reply.response == "".join(fake.reply)
    streamed = list(client.generate(model=MODEL, prompt="hi", stream=True))
    assert streamed[-1].done and streamed[-1].context


def test_list_ps_show(client: ollama.Client) -> None:
    listed = client.list()
    assert isinstance(listed, ollama.ListResponse)
    assert MODEL in [m.model for m in listed.models]
    running = client.ps()
    assert isinstance(running, ollama.ProcessResponse)
    shown = client.show(MODEL)
    assert isinstance(shown, ollama.ShowResponse)
    assert shown.modelinfo is not None and "completion" in (shown.capabilities or [])


def test_embed_and_embeddings(client: ollama.Client) -> None:
    embedded = client.embed(model="nomic-embed-text", input=["a", "b"])
    assert isinstance(embedded, ollama.EmbedResponse) and len(embedded.embeddings) == 2
    legacy = client.embeddings(model="nomic-embed-text", prompt="a")
    assert isinstance(legacy, ollama.EmbeddingsResponse) and legacy.embedding


def test_pull(client: ollama.Client) -> None:
    assert client.pull("tinyllama").status == "success"
    statuses = [p.status for p in client.pull("tinyllama", stream=True)]
    assert statuses[-1] == "success"


def test_errors_become_response_errors(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="ghost", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404
    assert info.value.error == "model 'ghost' not found"
