"""The console's knowledge models in-process: create an alias through the form (it shows in the
list, in GET /rag/models and in the upstream's model list as clients see it), edit it, refusals said
in the page with what was typed (nothing stored), delete it after the confirmation page. Real
engines; the fake model."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from proxy.core.modes import MODES
from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.console_helpers import post
from tests.fake_ollama import FakeOllama
from tests.matching import must_find
from tests.test_console_kbs import create, stray_urls

pytestmark = pytest.mark.anyio

MODEL = "llama3.2:latest"


@pytest.fixture
async def console(settings: Settings, fake: FakeOllama):
    async with gateway_client(settings, fake) as client:
        await create(client, "hr")
        yield client


def form(**fields: str) -> dict[str, str]:
    return {"alias": "hr-bot", "model": MODEL, "kb": "hr", "mode": "", "system": "", "options": "", **fields}


async def api_models(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    return {m["alias"]: m for m in (await client.get("/rag/models")).json()["models"]}


def options_of(page: str, name: str) -> list[str]:
    """The options of the model form's select ``name`` (the header's switcher has a select named kb too)."""
    form = must_find(r'<form [^>]*id="model-form">(.*?)</form>', page, re.DOTALL).group(1)
    select = must_find(rf'<select name="{name}"[^>]*>(.*?)</select>', form, re.DOTALL).group(1)
    return re.findall(r'<option value="([^"]*)"', select)


def alert(page: str) -> str:
    return must_find(r'<p class="error" role="alert">(.*?)</p>', page).group(1)


async def test_the_form_offers_the_upstreams_models_the_bases_and_the_modes(console: httpx.AsyncClient) -> None:
    page = await console.get("/admin/models")
    assert page.status_code == 200 and "No knowledge models yet" in page.text
    assert options_of(page.text, "model") == ["", "llama3.2:latest", "nomic-embed-text:latest", "qwen3:latest"]
    assert options_of(page.text, "kb") == ["default", "hr"]
    assert options_of(page.text, "mode") == ["", *MODES]
    assert 'href="/admin/models" aria-current="page">Knowledge models' in page.text
    on_hr = await console.get("/admin/models", params={"kb": "hr"})
    assert stray_urls(on_hr.text, "hr") == []


async def test_creating_editing_and_deleting_a_knowledge_model(console: httpx.AsyncClient) -> None:
    made = await post(console, "/admin/models", form(mode="local", system="You answer HR questions.",
                                                     options='{"temperature": 0.2}'))
    assert made.status_code == 303 and made.headers["location"] == "/admin/models"
    listed = await api_models(console)
    assert listed["hr-bot:latest"] | {"created_at": "", "updated_at": ""} == {
        "alias": "hr-bot:latest", "model": MODEL, "kb": "hr", "mode": "local", "system": "You answer HR questions.",
        "options": {"temperature": 0.2}, "created_at": "", "updated_at": "", "base_model_present": True}
    tags = [m["name"] for m in (await console.get("/api/tags")).json()["models"]]
    assert "hr-bot:latest" in tags   # what every Ollama client lists
    base = await console.get("/admin/kbs/hr")   # its base names it, and says what deleting the base does to it
    assert '<a href="/admin/models/hr-bot:latest">hr-bot:latest</a>' in base.text
    assert "a chat with it fails until you point it at another base" in base.text

    page = await console.get("/admin/models")
    row = must_find(r'<tr data-alias="hr-bot:latest">(.*?)</tr>', page.text, re.DOTALL).group(1)
    assert "<code>llama3.2:latest</code>" in row and ">hr</a>" in row and "local" in row
    assert "You answer HR questions." in row and "missing upstream" not in row

    edit = await console.get("/admin/models/hr-bot:latest")
    assert edit.status_code == 200
    assert re.search(r'<option value="local" selected>', edit.text)
    assert '>You answer HR questions.</textarea>' in edit.text
    saved = await post(console, "/admin/models/hr-bot:latest", form(model="qwen3:latest", kb="default",
                                                                     options=""))
    assert saved.status_code == 303
    changed = (await api_models(console))["hr-bot:latest"]
    assert (changed["model"], changed["kb"], changed["mode"], changed["system"], changed["options"]) == (
        "qwen3:latest", "default", None, None, {})
    assert changed["created_at"] == listed["hr-bot:latest"]["created_at"]

    confirm = await console.get("/admin/models/hr-bot:latest/delete")
    assert confirm.status_code == 200 and "Delete the knowledge model" in confirm.text
    assert await api_models(console) != {}   # asking is not deleting
    deleted = await post(console, "/admin/models/hr-bot:latest/delete")
    assert deleted.status_code == 303 and deleted.headers["location"] == "/admin/models"
    assert await api_models(console) == {}
    assert (await console.get("/admin/models/hr-bot:latest")).status_code == 404
    assert "hr-bot:latest" not in [m["name"] for m in (await console.get("/api/tags")).json()["models"]]


async def test_refusals_are_said_in_the_page_and_store_nothing(console: httpx.AsyncClient) -> None:
    assert (await post(console, "/admin/models", form())).status_code == 303
    before = await api_models(console)
    for fields, status, said in [
        (form(alias="bad name!", system="kept as typed"), 400, "invalid knowledge model name"),
        (form(alias="other", options="{temperature: 1}"), 400, "options must be a JSON object"),
        (form(alias="other", options="[1, 2]"), 400, "options must be a JSON object"),
        (form(alias="other", kb="nope"), 400, "no knowledge base named &#39;nope&#39;"),
        (form(alias="other", mode="fast"), 400, "invalid mode &#39;fast&#39;"),
        (form(alias="other", model=""), 400, "invalid base model"),
        (form(alias="qwen3"), 409, "the upstream has a model named &#39;qwen3&#39;"),
        (form(alias="hr-bot"), 409, "a knowledge model named &#39;hr-bot:latest&#39; already exists"),
    ]:
        refused = await post(console, "/admin/models", fields)
        assert refused.status_code == status, (fields, refused.text[:300])
        assert said in alert(refused.text), alert(refused.text)
        assert 'id="create-model"' in refused.text   # the page, with its form
        if fields["system"]:
            assert ">kept as typed</textarea>" in refused.text
    assert await api_models(console) == before

    refused = await post(console, "/admin/models/hr-bot:latest", form(options="nonsense", system="typed"))
    assert refused.status_code == 400 and "options must be a JSON object" in alert(refused.text)
    assert ">nonsense</textarea>" in refused.text and ">typed</textarea>" in refused.text
    assert await api_models(console) == before
    assert (await post(console, "/admin/models/nope:latest", form())).status_code == 404
    unchecked = await console.post("/admin/models", data=form(alias="nocsrf"))
    assert unchecked.status_code == 403 and await api_models(console) == before


async def test_an_alias_whose_base_model_left_the_upstream_is_shown_missing(
        console: httpx.AsyncClient, fake: FakeOllama) -> None:
    response = await console.put("/rag/models/old-bot", json={"model": "gone:latest", "kb": "hr"})
    assert response.status_code == 201, response.text
    page = await console.get("/admin/models")
    row = must_find(r'<tr data-alias="old-bot:latest">(.*?)</tr>', page.text, re.DOTALL).group(1)
    assert "missing upstream" in row
    edit = await console.get("/admin/models/old-bot:latest")
    assert "is not on the upstream" in edit.text
    assert options_of(edit.text, "model")[0] == "gone:latest"   # kept selected, said to be missing
    assert "gone:latest (not upstream)" in edit.text


async def test_an_alias_whose_base_was_deleted_asks_for_another(console: httpx.AsyncClient) -> None:
    await create(console, "temp")
    assert (await console.put("/rag/models/temp-bot", json={"model": MODEL, "kb": "temp"})).status_code == 201
    assert (await console.delete("/rag/kbs/temp", params={"confirm": "temp"})).status_code == 200
    edit = await console.get("/admin/models/temp-bot:latest")
    assert options_of(edit.text, "kb") == ["temp", "default", "hr"]
    assert '<option value="temp" selected>temp (no longer exists: choose another)' in edit.text
    kept = await post(console, "/admin/models/temp-bot:latest", form(kb="temp"))
    assert kept.status_code == 400 and "no knowledge base named &#39;temp&#39;" in alert(kept.text)
    moved = await post(console, "/admin/models/temp-bot:latest", form(kb="hr"))
    assert moved.status_code == 303 and (await api_models(console))["temp-bot:latest"]["kb"] == "hr"
