"""Nothing of a document outside a filter reaches a filtered answer: not its relation keywords, not
its name on a passage both documents share, not what it said of an entity merged with one the
matching document names. Each case puts a word only the other document holds and looks for it
anywhere in /rag/query's whole answer (and in what a filtered chat sends upstream), in the classic
layout and the default one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.core.settings import Settings
from proxy.retrieval.params import QueryParams
from proxy.retrieval.scoped_store import ScopedStore
from tests.chat_helpers import body, chats
from tests.conftest import NOMINAL_UPSTREAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import CLASSIC, query, settle

pytestmark = pytest.mark.anyio

PEOPLE = {"Alice Smith": "Person", "Bob Jones": "Person", "Acme Corp": "Organization",
          "Globex Inc": "Organization", "Berlin": "Location"}
LAYOUTS = [pytest.param(CLASSIC, id="classic"), pytest.param({}, id="defaults")]


class VerbFacts(KnownFacts):
    """A perfect extractor whose relations carry their sentence's verb as the keyword (the shared
    extractor gives every relation the same keywords, which could not show a leak)."""

    def extract(self, passage: str, *, gleaning: bool) -> dict[str, list[dict[str, Any]]]:
        found = super().extract(passage, gleaning=gleaning)
        for relation in found["relations"]:
            words = relation["description"].split()
            relation["keywords"] = [words[2] if len(words) > 2 else "related"]
        return found


@pytest.fixture
def settings(tmp_path: Path) -> Settings:   # small chunks: a document's sections are passages of their own
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": NOMINAL_UPSTREAM, "GRAPHGATE_DATA_DIR": str(tmp_path / "data"),
                                  "GRAPHGATE_KEYWORD_BUDGET": "30", "GRAPHGATE_CHUNK_TOKENS": "64",
                                  "GRAPHGATE_CHUNK_OVERLAP": "0"})


@pytest.fixture
def verbs(fake: FakeOllama) -> VerbFacts:
    fake.structured = VerbFacts(PEOPLE)
    return fake.structured


async def put(client: httpx.AsyncClient, name: str, text: str, metadata: dict[str, Any]) -> None:
    response = await client.post("/rag/documents", json={"name": name, "text": text, "metadata": metadata})
    assert response.status_code == 202, response.text
    assert (await settle(client, response.json()["documents"][0]["id"]))["status"] == "processed"


@pytest.mark.parametrize("knobs", LAYOUTS)
async def test_relation_keywords_and_weights_are_the_matching_documents(
        client: httpx.AsyncClient, verbs: VerbFacts, knobs: dict[str, str]) -> None:
    await put(client, "public.txt", "Alice Smith works with Bob Jones.", {"c": "pub"})
    await put(client, "secret.txt", "Alice Smith bribed Bob Jones.", {"c": "sec"})
    question = "What do Alice Smith and Bob Jones do together?"
    everything = await query(client, query=question, **knobs)
    assert "bribed" in json.dumps(everything)   # the word is there to leak
    filtered = await query(client, query=question, filters={"c": "pub"}, **knobs)
    assert filtered["relations"] and "bribed" not in json.dumps(filtered)
    assert [r["keywords"] for r in filtered["relations"]] == [["works"]]
    assert filtered["relations"][0]["weight"] < everything["relations"][0]["weight"]


@pytest.mark.parametrize("knobs", LAYOUTS)
async def test_a_shared_passage_names_only_the_matching_document(
        client: httpx.AsyncClient, verbs: VerbFacts, knobs: dict[str, str]) -> None:
    shared = "# Team\n\nAlice Smith works with Bob Jones. " + "They meet every week to plan the work. " * 4 + "\n\n"
    await put(client, "acquisition-plan.md", shared + "# Plan\n\n" + "The merger stays confidential. " * 4,
              {"c": "sec"})
    await put(client, "public.md", shared + "# Notes\n\n" + "These notes can be shared freely. " * 4, {"c": "pub"})
    question = "Who works with Bob Jones?"
    everything = await query(client, query=question, **knobs)
    assert any(set(c["documents"]) == {"acquisition-plan.md", "public.md"} for c in everything["chunks"])
    filtered = await query(client, query=question, filters={"c": "pub"}, **knobs)
    assert filtered["chunks"] and "acquisition-plan" not in json.dumps(filtered)
    assert [r["document"] for r in filtered["references"]] == ["public.md"]


@pytest.mark.parametrize("knobs", LAYOUTS)
async def test_a_merged_entity_is_described_by_the_matching_documents_alone(
        client: httpx.AsyncClient, verbs: VerbFacts, knobs: dict[str, str]) -> None:
    await put(client, "public.txt", "Acme Corp works with Berlin.", {"c": "pub"})
    await put(client, "secret.txt", "Globex Inc bribed Berlin officials. Globex Inc is insolvent.", {"c": "sec"})
    merged = await client.post("/rag/merge", json={"entities": ["Acme Corp", "Globex Inc"], "target": "Globex Inc"})
    assert merged.status_code == 200, merged.text
    question = "What does Globex Inc do in Berlin?"
    everything = await query(client, query=question, **knobs)
    assert "insolvent" in json.dumps(everything)
    filtered = await query(client, query=question, filters={"c": "pub"}, **knobs)
    text = json.dumps(filtered)
    assert "Globex Inc" in text and "works" in text   # the merged entity, as the public document tells it
    assert "insolvent" not in text and "bribed" not in text


async def test_a_filtered_chat_sends_nothing_of_the_other_documents(
        client: httpx.AsyncClient, fake: FakeOllama, verbs: VerbFacts) -> None:
    await put(client, "public.txt", "Alice Smith works with Bob Jones.", {"c": "pub"})
    await put(client, "secret.txt", "Alice Smith bribed Bob Jones. Bob Jones is insolvent.", {"c": "sec"})
    response = await client.post("/api/chat", json=body("What do Alice Smith and Bob Jones do?"),
                                 headers={"X-GraphGate-Filter": '{"c": "pub"}'})
    assert response.status_code == 200
    sent = json.dumps(chats(fake)[-1].json["messages"])
    assert "works" in sent and "bribed" not in sent and "insolvent" not in sent and "secret.txt" not in sent


async def test_the_graph_walk_stays_inside_the_filter(client: httpx.AsyncClient, verbs: VerbFacts) -> None:
    """An entity only the other document names, one hop from one the matching document names: the
    expansion's walk under the filter neither takes its edges nor ranks it (the channel's finds are
    also cut to the scope afterwards; the walk must not spend itself outside it first)."""
    await put(client, "public.txt", "Alice Smith works with Bob Jones.", {"c": "pub"})
    await put(client, "secret.txt", "Bob Jones bribed Globex Inc. Globex Inc bribed Berlin officials.", {"c": "sec"})
    kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
    retriever = kb.retriever
    settings = client._transport.app.state.gateway.settings  # type: ignore[attr-defined]
    params = QueryParams.from_settings(settings, mode="mix").with_overrides({"filters": {"c": "pub"}})
    scoped = ScopedStore(kb.store, await retriever._scope(params))
    seeds = {"bob jones": 1.0}
    everywhere = kb.store.neighbourhood_sync(seeds, hops=2, cap=100)
    assert ("bob jones", "globex inc") in everywhere or ("globex inc", "bob jones") in everywhere
    edges = scoped.neighbourhood_sync(seeds, hops=2, cap=100)
    assert {frozenset(edge) for edge in edges} == {frozenset(("alice smith", "bob jones"))}
    ranked = scoped.pagerank_sync(seeds, everywhere, [1.0] * len(everywhere), damping=0.5, limit=10)
    assert {key for key, _ in ranked} == {"bob jones", "alice smith"}
    question = "Who did Bob Jones bribe, and whom did that company bribe?"
    text = json.dumps(await query(client, query=question, filters={"c": "pub"}))
    assert "Bob Jones" in text and "Globex" not in text and "Berlin" not in text and "bribed" not in text
