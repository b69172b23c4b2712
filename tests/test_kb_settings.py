"""A knowledge base's own settings (issue 20, proxy/knowledge/base_settings.py): overrides of the
extraction model, entity types, language, chunking and gleaning, checked with the settings table's
parsers when given (POST /rag/kbs, PATCH /rag/kbs/{name}: 400 naming the setting, nothing stored),
applied when the base opens (its extraction calls and its chunks, not the other bases'), and
applied to an open base once no request holds it, without a restart. Also /rag/health?kb= and the
metrics' kb label."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import Settings
from proxy.knowledge.bases import BASES_DIR, REGISTRY_FILE
from tests.background import background_written
from tests.conftest import NOMINAL_UPSTREAM, gateway_client
from tests.corpus import CLUB, TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama, Recorded
from tests.test_knowledge_bases import create, registry_of, upload

pytestmark = pytest.mark.anyio

# about 1,500 tokens: one chunk at the default 1,200-token size... two, and many at 100
LONG = "\n\n".join(f"Paragraph {i} of the long handbook says that rule {i} applies to every team member "
                   f"on every working day, with no exception, as the board decided in meeting {i}."
                   for i in range(60))


def extraction_calls(requests: list[Recorded]) -> list[dict[str, Any]]:
    """The bodies of the extraction calls (chat calls asking for entities) among ``requests``."""
    return [r.json for r in requests
            if r.path == "/api/chat" and isinstance(r.json, dict)
            and "entities" in json.dumps((r.json.get("format") or {}).get("properties") or {})]


def prompt_of(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body["messages"])


async def test_overrides_reach_that_bases_extraction_calls_only(settings: Settings, fake: FakeOllama,
                                                                facts: KnownFacts) -> None:
    overrides = {"llm_model": "qwen3:latest", "entity_types": ["Person", "Organization", "Spaceship"],
                 "language": "French"}
    async with gateway_client(settings, fake) as client:
        made = await client.post("/rag/kbs", json={"name": "hr", "settings": overrides})
        assert made.status_code == 201, made.text
        assert made.json()["settings"] == overrides
        assert made.json()["effective"]["llm_model"] == "qwen3:latest"
        assert made.json()["effective"]["chunk_tokens"] == settings.chunk_tokens   # not overridden: the gateway's

        start = len(fake.requests)
        await upload(client, "hr", "team.txt", TEAM)
        in_hr = extraction_calls(fake.requests[start:])
        start = len(fake.requests)
        await upload(client, "default", "team.txt", TEAM)
        in_default = extraction_calls(fake.requests[start:])

        described = (await client.get("/rag/kbs/hr")).json()
        default = (await client.get("/rag/kbs/default")).json()
    assert in_hr and in_default
    for body in in_hr:
        assert body["model"] == "qwen3:latest"
        assert "Spaceship" in prompt_of(body) and "French" in prompt_of(body)
    for body in in_default:
        assert body["model"] != "qwen3:latest"
        assert "Spaceship" not in prompt_of(body) and "French" not in prompt_of(body)
    assert described["name"] == "hr" and described["open"] is True and described["settings"] == overrides
    assert described["effective"] == {"llm_model": "qwen3:latest", "entity_types": ["Person", "Organization",
                                                                                   "Spaceship"],
                                      "language": "French", "chunk_tokens": settings.chunk_tokens,
                                      "chunk_overlap": settings.chunk_overlap, "gleaning": settings.gleaning}
    assert default["settings"] == {} and default["effective"]["entity_types"] == list(settings.entity_types)


async def chunks_of(client: httpx.AsyncClient, kb: str) -> int:
    stats = (await client.get("/rag/stats", params={"kb": kb})).json()
    return int(stats["chunks"])


async def test_a_chunking_override_cuts_that_bases_documents_only(settings: Settings, fake: FakeOllama,
                                                                  facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "plain")
        made = await client.post("/rag/kbs", json={"name": "fine", "settings": {"chunk_tokens": "100",
                                                                               "chunk_overlap": 0}})
        assert made.status_code == 201, made.text
        assert made.json()["settings"] == {"chunk_tokens": 100, "chunk_overlap": 0}   # stored parsed
        for kb in ("fine", "plain", "default"):
            await upload(client, kb, "handbook.txt", LONG)
        counts = {kb: await chunks_of(client, kb) for kb in ("fine", "plain", "default")}
    assert counts["plain"] == counts["default"] <= 2
    assert counts["fine"] >= 10, counts


@pytest.mark.parametrize(("given", "named"), [
    ({"chunk_tokens": 10}, "chunk_tokens"),                      # below the table's 64
    ({"chunk_tokens": "many"}, "chunk_tokens"),
    ({"gleaning": 9}, "gleaning"),
    ({"gleaning": True}, "gleaning"),
    ({"entity_types": ""}, "entity_types"),
    ({"entity_types": [1, 2]}, "entity_types"),
    ({"llm_model": ""}, "llm_model"),
    ({"language": ["French"]}, "language"),
    ({"embed_model": "other"}, "embed_model"),                   # not a per-base setting
    ({"upstream": "http://elsewhere"}, "upstream"),
    ({"no_such_setting": 1}, "no_such_setting"),
    ({"chunk_tokens": 200, "chunk_overlap": 200}, "chunk_overlap"),
    ({"chunk_overlap": 2000}, "chunk_overlap"),                  # above the default 1200-token chunks
])
async def test_a_bad_override_is_refused_and_nothing_is_stored(settings: Settings, fake: FakeOllama,
                                                               given: dict[str, Any], named: str) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "kept")
        registry = settings.data_dir / BASES_DIR / REGISTRY_FILE
        before = registry.read_bytes()
        made = await client.post("/rag/kbs", json={"name": "bad", "settings": given})
        changed = await client.patch("/rag/kbs/kept", json={"settings": given})
        listed = [b["name"] for b in (await client.get("/rag/kbs")).json()["kbs"]]
        kept = (await client.get("/rag/kbs/kept")).json()
    for response in (made, changed):
        assert response.status_code == 400, response.text
        assert named in response.json()["error"], response.text
    assert listed == ["default", "kept"] and kept["settings"] == {}
    assert not (settings.data_dir / BASES_DIR / "bad").exists()
    assert registry.read_bytes() == before


async def test_patch_and_get_of_a_base(settings: Settings, fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await client.post("/rag/kbs", json={"name": "fr", "settings": {"language": "French", "gleaning": 0}})
        changed = await client.patch("/rag/kbs/fr", json={"settings": {"language": None, "chunk_tokens": 600}})
        assert changed.status_code == 200, changed.text
        assert changed.json()["settings"] == {"gleaning": 0, "chunk_tokens": 600}
        assert changed.json()["effective"]["language"] == settings.language   # the override removed
        assert (await client.get("/rag/kbs/fr")).json() == changed.json()
        listed = (await client.get("/rag/kbs")).json()["kbs"]
        assert [b["name"] for b in listed] == ["default", "fr"] and "effective" not in listed[1]   # the list's shape
        assert (await client.patch("/rag/kbs/fr", json={"settings": "x"})).status_code == 400
        assert (await client.patch("/rag/kbs/fr", json={})).status_code == 400
        assert (await client.patch("/rag/kbs/fr", json={"settings": {}, "name": "x"})).status_code == 400
        assert (await client.patch("/rag/kbs/nope", json={"settings": {}})).status_code == 404
        assert (await client.get("/rag/kbs/nope")).status_code == 404
        assert (await client.get("/rag/kbs/No Such")).status_code == 400
        refused = await client.patch("/rag/kbs/default", json={"settings": {"language": "French"}})
        assert refused.status_code == 409 and "GRAPHGATE_" in refused.json()["error"]
    registry = json.loads((settings.data_dir / BASES_DIR / REGISTRY_FILE).read_text())
    assert registry["bases"]["fr"]["settings"] == {"gleaning": 0, "chunk_tokens": 600}
    async with gateway_client(settings, fake) as client:   # kept across a restart
        assert (await client.get("/rag/kbs/fr")).json()["effective"]["chunk_tokens"] == 600


async def test_a_change_reaches_an_open_base_once_no_request_holds_it(settings: Settings, fake: FakeOllama,
                                                                     facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        await upload(client, "hr", "team.txt", TEAM)
        bases = registry_of(client)
        assert bases.bases["hr"].knowledge is not None

        # idle: closed at once, reopened by the next request with the new settings
        changed = await client.patch("/rag/kbs/hr", json={"settings": {"entity_types": "Person,Spaceship"}})
        assert changed.status_code == 200 and changed.json()["open"] is False
        start = len(fake.requests)
        await upload(client, "hr", "club.txt", CLUB)
        calls = extraction_calls(fake.requests[start:])
        assert calls and all("Spaceship" in prompt_of(body) for body in calls)

        # held by a request: kept open for it, closed when it ends
        async with bases.lease("hr") as held:
            changed = await client.patch("/rag/kbs/hr", json={"settings": {"entity_types": None}})
            assert changed.status_code == 200 and changed.json()["open"] is True
            assert bases.bases["hr"].knowledge is held   # the request's service is not closed under it
            assert await held.stats()   # and still answers
        with anyio.fail_after(30):
            while bases.bases["hr"].knowledge is not None:
                await anyio.sleep(0.01)
        start = len(fake.requests)
        await upload(client, "hr", "team2.txt", TEAM + " Again.")
        calls = extraction_calls(fake.requests[start:])
        assert calls and not any("Spaceship" in prompt_of(body) for body in calls)
        # the base's documents were kept through every close
        names = sorted(d["name"] for d in (await client.get("/rag/documents", params={"kb": "hr"})).json()["documents"])
        assert names == ["club.txt", "team.txt", "team2.txt"]


async def test_health_describes_the_base_named(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        await create(client, "legal")
        await upload(client, "hr", "team.txt", TEAM)
        await upload(client, "hr", "club.txt", CLUB)
        default = await client.get("/rag/health")
        hr = await client.get("/rag/health", params={"kb": "hr"})
        legal = await client.get("/rag/health", headers={"X-GraphGate-KB": "legal"})
        unknown = await client.get("/rag/health", params={"kb": "sales"})
        bad = await client.get("/rag/health", params={"kb": "No Such"})
    assert default.status_code == hr.status_code == legal.status_code == 200, (default.text, hr.text, legal.text)
    assert default.json()["kb"] == "default" and default.json()["store"]["documents"]["processed"] == 0
    assert hr.json()["kb"] == "hr" and hr.json()["store"]["documents"]["processed"] == 2
    assert hr.json()["store"]["open"] and hr.json()["ready"]
    assert legal.json()["kb"] == "legal" and legal.json()["store"]["documents"]["processed"] == 0
    assert unknown.status_code == 404 and "no knowledge base named 'sales'" in unknown.json()["error"]
    assert bad.status_code == 400
    # the public read never lists the bases
    assert "hr" not in json.dumps(default.json()) and "legal" not in json.dumps(hr.json())


def samples_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_the_metrics_of_each_base_carry_its_name(settings: Settings, fake: FakeOllama,
                                                       facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(kb_idle_seconds=3600), fake) as client:
        await create(client, "hr")
        await create(client, "legal")
        await create(client, "closed")
        await upload(client, "hr", "team.txt", TEAM)
        await upload(client, "legal", "club.txt", CLUB)
        await upload(client, "legal", "handbook.txt", LONG)
        for kb, question in (("hr", "Who leads Orion?"), ("legal", "Who plays chess?")):
            answered = await client.post("/rag/query", params={"kb": kb}, json={"query": question, "mode": "local"})
            assert answered.status_code == 200, answered.text
        await background_written()   # the traces, which the latencies follow, are kept in the background
        bases = registry_of(client)
        opened = bases.opened
        samples = samples_of((await client.get("/metrics")).text)
        assert bases.opened == opened and bases.bases["closed"].knowledge is None   # a scrape opens nothing
        deleted = await client.delete("/rag/kbs/legal", params={"confirm": "legal"})
        assert deleted.status_code == 200, deleted.text
        after_deletion = samples_of((await client.get("/metrics")).text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    for kb in ("hr", "legal"):
        assert value("graphgate_query_duration_seconds_count", kb=kb, mode="local") == 1, kb
        assert value("graphgate_query_stage_duration_seconds_count", kb=kb, mode="local", stage="search") == 1, kb
        assert value("graphgate_store_up", kb=kb) == 1
        assert value("graphgate_upstream_requests_total", kb=kb, kind="extraction", upstream=NOMINAL_UPSTREAM) >= 1
        assert value("graphgate_upstream_requests_total", kb=kb, kind="embedding", upstream=NOMINAL_UPSTREAM) >= 1
    assert ("graphgate_query_duration_seconds_count", (("kb", "default"), ("mode", "local"))) not in samples
    assert value("graphgate_upstream_requests_total", kb="default", kind="extraction", upstream=NOMINAL_UPSTREAM) == 0
    assert value("graphgate_documents", kb="hr", status="processed") == 1
    assert value("graphgate_documents", kb="legal", status="processed") == 2
    assert value("graphgate_documents", kb="default", status="processed") == 0
    assert value("graphgate_chunks", kb="legal") > value("graphgate_chunks", kb="hr") >= 1
    assert value("graphgate_entities", kb="hr") >= 3
    assert value("graphgate_index_freshness_seconds", kb="hr") == 0
    assert value("graphgate_pipeline_documents", kb="legal", state="queued") == 0
    assert not any(dict(labels).get("kb") == "closed" for _, labels in samples)   # closed: not shown
    assert value("graphgate_llm_slots", model="chat") == settings.llm_concurrency   # shared: once, unlabelled
    # a deleted base's series go with it; the others stay
    assert not any(dict(labels).get("kb") == "legal" for _, labels in after_deletion)
    key = ("graphgate_query_duration_seconds_count", (("kb", "hr"), ("mode", "local")))
    assert after_deletion[key] == 1


async def test_a_list_edited_into_a_bad_override_says_so_and_is_mended_by_patch(settings: Settings,
                                                                                 fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hand")
    path = settings.data_dir / BASES_DIR / REGISTRY_FILE
    registry = json.loads(path.read_text())
    registry["bases"]["hand"]["settings"] = {"chunk_tokens": 5}   # below the table's 64
    path.write_text(json.dumps(registry))
    async with gateway_client(settings, fake) as client:
        described = (await client.get("/rag/kbs/hand")).json()
        refused = await client.get("/rag/documents", params={"kb": "hand"})
        other = await client.get("/rag/documents")
        mended = await client.patch("/rag/kbs/hand", json={"settings": {"chunk_tokens": None}})
        opened = await client.get("/rag/documents", params={"kb": "hand"})
    assert described["effective"] is None and "chunk_tokens" in described["error"]
    assert refused.status_code == 503 and "chunk_tokens" in refused.json()["error"]
    assert other.status_code == 200   # the other bases keep serving
    assert mended.status_code == 200 and mended.json()["settings"] == {}
    assert opened.status_code == 200 and opened.json()["documents"] == []


async def test_a_list_edited_into_an_unknown_override_is_mended_by_patch(settings: Settings,
                                                                         fake: FakeOllama) -> None:
    async with gateway_client(settings, fake) as client:
        await create(client, "hand")
    path = settings.data_dir / BASES_DIR / REGISTRY_FILE
    registry = json.loads(path.read_text())
    registry["bases"]["hand"]["settings"] = {"colour": "red"}   # no setting at all
    path.write_text(json.dumps(registry))
    async with gateway_client(settings, fake) as client:
        other = await client.patch("/rag/kbs/hand", json={"settings": {"language": "German"}})
        assert other.status_code == 400 and "'colour'" in other.json()["error"], other.text
        mended = await client.patch("/rag/kbs/hand", json={"settings": {"colour": None}})
        assert mended.status_code == 200, mended.text
        assert (await client.get("/rag/kbs/hand")).json()["settings"] == {}
        assert (await client.get("/rag/documents", params={"kb": "hand"})).status_code == 200
