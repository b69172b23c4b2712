"""The lists of knowledge bases, API keys and knowledge models shared by replicas (issue 21,
proxy/control/lists.py): the lists' contract on both backends (files, PostgreSQL), the import of a data
directory's files into an empty PostgreSQL, concurrent writers from two replicas both landing, and
two real replica processes on one PostgreSQL seeing each other's bases, keys and models within
seconds, revocations included."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from proxy.cli.main import main
from proxy.control.keys import KeyStore
from proxy.control.lists import (
    KBS,
    KEYS,
    MODELS,
    FileLists,
    ListConflict,
    Lists,
    StoredList,
    Unchanged,
    following,
)
from proxy.control.models import KnowledgeModels
from proxy.core.errors import NotFound
from proxy.core.settings import Settings
from proxy.guards.auth import COOKIE
from proxy.knowledge.bases import base_settings_sync
from proxy.knowledge.migrate_store import to_postgres
from proxy.store.postgres.lists import PgLists
from proxy.store.postgres.schema import drop
from tests.conftest import gateway_client
from tests.console_auth_helpers import PASSWORD, console_client, log_in
from tests.console_helpers import csrf_of
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.servers import silent_port
from tests.store_backends import base_schemas, restart_pg
from tests.test_crash_recovery import NAMES, corpus
from tests.test_knowledge_bases import create, names_of_documents, upload
from tests.test_replicas_e2e import kb, replica, upstream  # noqa: F401  (fixtures)

FOLLOW_SECONDS = 6.0   # a notification is milliseconds; the poll's 2 s is the bound when one is lost


@pytest.fixture(params=["embedded", "postgresql"])
def lists(request: pytest.FixtureRequest, tmp_path: Path) -> Lists:
    if request.param == "embedded":
        return FileLists(tmp_path / "data")
    return PgLists(request.getfixturevalue("pg_server"), tmp_path / "data")


# --- the contract, on both backends ---

def test_a_list_never_written_reads_as_none_at_version_zero(lists: Lists) -> None:
    assert lists.read_sync(KEYS) == StoredList(None, 0)
    assert KEYS not in lists.versions_sync()


def test_a_write_is_read_back_with_a_new_version(lists: Lists) -> None:
    first = lists.write_sync(MODELS, {"models": {}}, 0)
    assert first.version != 0 and lists.read_sync(MODELS) == first
    second = lists.write_sync(MODELS, {"models": {"a:latest": {"model": "m", "kb": "default"}}}, first.version)
    assert second.version not in (0, first.version)
    assert lists.read_sync(MODELS) == second
    assert lists.versions_sync()[MODELS] == second.version


def test_a_write_over_another_version_is_refused_and_changes_nothing(lists: Lists) -> None:
    first = lists.write_sync(KBS, {"version": 1, "bases": {}}, 0)
    with pytest.raises(ListConflict):
        lists.write_sync(KBS, {"version": 1, "bases": {"x": {}}}, 0)   # someone wrote since version 0
    assert lists.read_sync(KBS) == first
    lists.write_sync(KBS, {"version": 1, "bases": {"y": {}}}, first.version)
    with pytest.raises(ListConflict):
        lists.write_sync(KBS, {"version": 1, "bases": {"z": {}}}, first.version)
    assert lists.read_sync(KBS).body == {"version": 1, "bases": {"y": {}}}


def test_an_update_changes_the_newest_version_or_nothing(lists: Lists) -> None:
    lists.update_sync(KEYS, lambda body: {"keys": [*((body or {}).get("keys", [])), "a"]})
    after = lists.update_sync(KEYS, lambda body: {"keys": [*body["keys"], "b"]})
    assert after.body == {"keys": ["a", "b"]} and lists.read_sync(KEYS) == after

    def leave(body: Any) -> Any:
        raise Unchanged

    assert lists.update_sync(KEYS, leave) == after and lists.read_sync(KEYS) == after

    def refuse(body: Any) -> Any:
        raise NotFound("no such key")

    with pytest.raises(NotFound):
        lists.update_sync(KEYS, refuse)
    assert lists.read_sync(KEYS) == after


def test_concurrent_updates_all_land(lists: Lists) -> None:
    def add(item: str) -> None:
        lists.update_sync(KEYS, lambda body: {"keys": [*((body or {}).get("keys", [])), item]})

    threads = [threading.Thread(target=add, args=(f"k{i}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(lists.read_sync(KEYS).body["keys"]) == sorted(f"k{i}" for i in range(12))


def test_the_files_are_written_as_before(tmp_path: Path) -> None:
    files = FileLists(tmp_path)
    files.write_sync(KEYS, {"version": 1, "keys": []}, 0)
    files.write_sync(KBS, {"version": 1, "bases": {}}, 0)
    assert json.loads((tmp_path / "keys.json").read_text()) == {"version": 1, "keys": []}
    assert stat.S_IMODE(os.stat(tmp_path / "keys.json").st_mode) == 0o600
    assert (tmp_path / "kbs" / "registry.json").is_file()
    assert not [p for p in tmp_path.rglob("*.tmp")]


# --- PostgreSQL: the import of a data directory's files, the table ---

def test_the_files_are_imported_once_into_an_empty_table(tmp_path: Path, pg_server: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "a"
    (data / "kbs").mkdir(parents=True)
    registry = {"version": 1, "default_created_at": "2026-01-01T00:00:00+00:00",
                "bases": {"hr": {"uid": "0123456789ab", "created_at": "2026-01-02T00:00:00+00:00", "settings": {}}}}
    (data / "kbs" / "registry.json").write_text(json.dumps(registry))
    (data / "models.json").write_text(json.dumps({"models": {}}))
    with caplog.at_level("INFO", logger="graphgate"):
        shared = PgLists(pg_server, data)
        assert shared.read_sync(KBS) == StoredList(registry, 1)
    assert any("imported" in r.getMessage() and "registry.json" in r.getMessage() for r in caplog.records)
    assert shared.read_sync(MODELS) == StoredList({"models": {}}, 1)
    assert shared.read_sync(KEYS) == StoredList(None, 0)   # no file: nothing to import
    # another replica's data directory, with other files: the table has the lists already
    other = tmp_path / "b"
    (other / "kbs").mkdir(parents=True)
    (other / "kbs" / "registry.json").write_text(json.dumps({"version": 1, "bases": {}}))
    assert PgLists(pg_server, other).read_sync(KBS) == StoredList(registry, 1)
    with psycopg.connect(pg_server) as con:
        columns = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                              "WHERE table_schema = 'public' AND table_name = 'graphgate_lists' "
                              "ORDER BY ordinal_position").fetchall()
    assert columns == [("name", "text"), ("body", "jsonb"), ("version", "bigint"),
                       ("updated_at", "timestamp without time zone")]


def test_an_unreadable_file_is_not_imported_and_its_list_is_refused(tmp_path: Path, pg_server: str) -> None:
    data = tmp_path / "a"
    data.mkdir()
    (data / "keys.json").write_text('{"keys": [')
    store = anyio.run(KeyStore.open, data, PgLists(pg_server, data))
    assert store.broken and "keys.json" in store.broken and store.in_use   # the API stays closed
    assert (data / "keys.json").read_text() == '{"keys": ['


# --- two replicas writing at once ---

@pytest.mark.anyio
async def test_keys_created_at_once_through_two_replicas_all_land(tmp_path: Path, pg_server: str) -> None:
    first = await KeyStore.open(tmp_path / "a", PgLists(pg_server, tmp_path / "a"))
    second = await KeyStore.open(tmp_path / "b", PgLists(pg_server, tmp_path / "b"))
    made: list[str] = []

    async def create(store: KeyStore, name: str) -> None:
        key, token = await store.create(name, "read", None, ["default"])
        made.append(token)

    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(create, first, f"a{i}")
            group.start_soon(create, second, f"b{i}")
    assert len(made) == 16
    again = await KeyStore.open(tmp_path / "c", PgLists(pg_server, tmp_path / "c"))
    assert sorted(k["name"] for k in again.describe()) == sorted([*(f"a{i}" for i in range(8)),
                                                                   *(f"b{i}" for i in range(8))])
    assert all(again.verify(token) is not None for token in made)


@pytest.mark.anyio
async def test_a_replica_follows_the_others_keys_and_models(tmp_path: Path, pg_server: str) -> None:
    """In process: what the lifespan starts on PostgreSQL (``following``) hands each change to memory."""
    lists_a, lists_b = PgLists(pg_server, tmp_path / "a"), PgLists(pg_server, tmp_path / "b")
    keys_a, keys_b = await KeyStore.open(tmp_path / "a", lists_a), await KeyStore.open(tmp_path / "b", lists_b)
    models_a = await KnowledgeModels(tmp_path / "a", lists_a).load()
    models_b = await KnowledgeModels(tmp_path / "b", lists_b).load()
    async with following(lists_b, {KEYS: keys_b, MODELS: models_b}):
        key, token = await keys_a.create("team", "read", None, ["default"])
        await models_a.put("team-bot", {"model": "llama3.2", "kb": "default"}, ["default"])
        with anyio.fail_after(FOLLOW_SECONDS):
            while keys_b.verify(token) is None or models_b.resolve("team-bot") is None:
                await anyio.sleep(0.01)
        await keys_a.revoke(key.id)
        await models_a.delete("team-bot")
        with anyio.fail_after(FOLLOW_SECONDS):
            while keys_b.verify(token) is not None or models_b.resolve("team-bot") is not None:
                await anyio.sleep(0.01)


# --- two replica processes ---

ADMIN_KEY = "the-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def eventually(check: Any, what: str, timeout: float = FOLLOW_SECONDS) -> Any:
    """``check()``'s first truthy answer, asked every 50 ms for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def names_of_bases(url: str) -> list[str]:
    return [b["name"] for b in httpx.get(f"{url}/rag/kbs", headers=ADMIN, timeout=10).json()["kbs"]]


@pytest.fixture
def two_replicas(tmp_path: Path, upstream: tuple[FakeOllama, KnownFacts],  # noqa: F811
                 pg_server: str) -> Iterator[tuple[str, str]]:
    fake, _ = upstream
    url: str = fake.url  # type: ignore[attr-defined]   # set by the upstream fixture
    first = replica(tmp_path / "a", url, pg_server, GRAPHGATE_API_KEY=ADMIN_KEY)
    second = replica(tmp_path / "b", url, pg_server, GRAPHGATE_API_KEY=ADMIN_KEY)
    try:
        yield first.url, second.url
    finally:
        first.stop()
        second.stop()


def test_a_base_key_and_model_made_through_one_replica_work_through_the_other(
        two_replicas: tuple[str, str], upstream: tuple[FakeOllama, KnownFacts], kb: str) -> None:  # noqa: F811
    a, b = two_replicas
    fake, _ = upstream
    response = httpx.post(f"{a}/rag/kbs", json={"name": kb}, headers=ADMIN, timeout=10)
    assert response.status_code == 201, response.text
    eventually(lambda: kb in names_of_bases(b), "the second replica does not know the base")
    docs = corpus(2)
    for name, text in docs.items():
        response = httpx.post(f"{a}/rag/documents", params={"kb": kb}, json={"name": name, "text": text},
                              headers=ADMIN, timeout=10)
        assert response.status_code == 202, response.text
    eventually(lambda: [d["status"] for d in httpx.get(f"{b}/rag/documents", params={"kb": kb}, headers=ADMIN,
                                                       timeout=10).json()["documents"]] == ["processed"] * 2,
               "the documents were not processed", timeout=90)

    # a knowledge model made through the first: a chat with its alias through the second is grounded
    made = httpx.put(f"{a}/rag/models/team", json={"model": "llama3.2", "kb": kb}, headers=ADMIN, timeout=10)
    assert made.status_code == 201, made.text
    person = next(n for n in NAMES if n in docs["doc0.md"])
    question = f"Who did {person} meet?"

    def chat() -> httpx.Response | None:
        reply = httpx.post(f"{b}/api/chat", headers=ADMIN, timeout=30, json={
            "model": "team", "stream": False, "messages": [{"role": "user", "content": question}]})
        return reply if reply.status_code == 200 else None

    reply = eventually(chat, "the second replica does not know the knowledge model")
    assert reply.json()["model"] == "team"
    forwarded = [r.json for r in fake.requests_to("/api/chat")
                 if r.json and r.json.get("model") == "llama3.2" and r.json["messages"][-1]["content"] == question]
    assert forwarded, "the chat was not forwarded as its base model"
    context = " ".join(m["content"] for m in forwarded[-1]["messages"][:-1])
    assert person in context, "the chat through the second replica was not grounded in the base"

    # a key made through the first works on the second at once; revoked through the first, refused there
    created = httpx.post(f"{a}/rag/keys", json={"name": "reader", "role": "read", "kbs": [kb]},
                         headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    reader = {"authorization": f"Bearer {created.json()['token']}"}

    def documents_with_key() -> int:
        return httpx.get(f"{b}/rag/documents", params={"kb": kb}, headers=reader, timeout=10).status_code

    eventually(lambda: documents_with_key() == 200, "the key made through the first is refused by the second")
    revoked = httpx.delete(f"{a}/rag/keys/{created.json()['id']}", headers=ADMIN, timeout=10)
    assert revoked.status_code == 200, revoked.text
    eventually(lambda: documents_with_key() == 401, "the second replica still takes a revoked key")

    # the model deleted through the second is gone from the first
    assert httpx.delete(f"{b}/rag/models/team", headers=ADMIN, timeout=10).status_code == 200
    eventually(lambda: httpx.get(f"{a}/rag/models/team", headers=ADMIN, timeout=10).status_code == 404,
               "the first replica still has the deleted knowledge model")

    # a base deleted through the first disappears from the second
    gone = httpx.delete(f"{a}/rag/kbs/{kb}", params={"confirm": kb}, headers=ADMIN, timeout=10)
    assert gone.status_code == 200, gone.text
    eventually(lambda: kb not in names_of_bases(b), "the second replica still lists the deleted base")
    assert httpx.get(f"{b}/rag/documents", params={"kb": kb}, headers=ADMIN, timeout=10).status_code == 404


def test_bases_made_at_once_through_two_replicas_all_land(two_replicas: tuple[str, str]) -> None:
    a, b = two_replicas
    names = [f"c{i}" for i in range(6)]
    results: list[int] = []

    def make(url: str, name: str) -> None:
        results.append(httpx.post(f"{url}/rag/kbs", json={"name": name}, headers=ADMIN, timeout=10).status_code)

    threads = [threading.Thread(target=make, args=(a if i % 2 else b, name)) for i, name in enumerate(names)]
    threads += [threading.Thread(target=make, args=(b if i % 2 else a, name)) for i, name in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [201] * len(names) + [409] * len(names)   # each name made once
    for url in (a, b):
        eventually(lambda url=url: names_of_bases(url) == ["default", *names], f"{url} misses a base")


# --- the command line with no gateway running, on PostgreSQL ---

def test_cli_keys_and_a_bases_settings_read_the_shared_lists(tmp_path: Path, pg_server: str,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHGATE_STORE", pg_server)
    data = tmp_path / "a"
    PgLists(pg_server, data).write_sync(KBS, {"version": 1, "bases": {"hr": {
        "uid": "0123456789ab", "created_at": "2026-01-01T00:00:00+00:00", "settings": {"language": "French"}}}}, 0)
    flags = ["--data-dir", str(data), "--port", str(silent_port())]
    capsys.readouterr()
    assert main(["keys", "create", "--name", "offline", "--role", "read", "--kb", "hr", *flags]) == 0
    token = capsys.readouterr().out.strip()
    other = anyio.run(KeyStore.open, tmp_path / "b", PgLists(pg_server, tmp_path / "b"))
    assert other.verify(token) is not None and not (data / "keys.json").exists()
    assert main(["keys", "create", "--name", "x", "--role", "read", "--kb", "eng", *flags]) == 1
    assert main(["keys", "revoke", token.split("_")[1], *flags]) == 0
    assert anyio.run(KeyStore.open, tmp_path / "b", PgLists(pg_server, tmp_path / "b")).describe() == []
    settings = Settings.load(environ={"GRAPHGATE_DATA_DIR": str(data), "GRAPHGATE_STORE": pg_server})
    hr = base_settings_sync(settings, "hr")   # graphgate reindex --kb hr
    assert hr.data_dir == data / "kbs" / "hr" and hr.language == "French"
    with pytest.raises(NotFound):
        base_settings_sync(settings, "eng")


# --- console logouts ---

@pytest.mark.anyio
async def test_a_console_logout_through_one_replica_is_honoured_by_the_other(
        settings: Settings, fake: FakeOllama, pg_server: str, tmp_path: Path) -> None:
    before = base_schemas(pg_server)
    shared = settings.replace(store=pg_server, admin_password=PASSWORD, session_secret="a shared secret, 32 chars")
    try:
        async with console_client(shared.replace(data_dir=tmp_path / "a"), fake) as a, \
                console_client(shared.replace(data_dir=tmp_path / "b"), fake) as b:
            await log_in(a)
            token = csrf_of((await a.get("/admin/")).text)
            cookie = a.cookies[COOKIE]
            b.cookies.set(COOKIE, cookie)
            assert (await b.get("/admin/", follow_redirects=False)).status_code == 200   # one login, both replicas
            out = await a.post("/admin/logout", headers={"X-CSRF-Token": token}, follow_redirects=False)
            assert out.status_code == 303
            with anyio.fail_after(FOLLOW_SECONDS):
                while (await b.get("/admin/", follow_redirects=False)).status_code == 200:
                    await anyio.sleep(0.02)
            assert (await b.get("/rag/traces", headers={"X-CSRF-Token": token})).status_code == 401
        async with console_client(shared.replace(data_dir=tmp_path / "c"), fake) as c:   # a replica started later
            c.cookies.set(COOKIE, cookie)
            assert (await c.get("/admin/", follow_redirects=False)).status_code == 303
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            for schema in base_schemas(pg_server) - before:
                drop(con, schema)


@pytest.mark.anyio
async def test_a_playground_answer_prepared_through_one_replica_streams_from_the_other(
        settings: Settings, fake: FakeOllama, pg_server: str, tmp_path: Path) -> None:
    """The playground's two requests (retrieve, then stream the answer) may reach different replicas
    behind a load balancer: the pending answer is the server's, taken once, by its session only."""
    from tests.matching import must_find
    from tests.playground_helpers import run

    before = base_schemas(pg_server)
    shared = settings.replace(store=pg_server, admin_password=PASSWORD, session_secret="a shared secret, 32 chars")
    try:
        async with console_client(shared.replace(data_dir=tmp_path / "a"), fake) as a, \
                console_client(shared.replace(data_dir=tmp_path / "b"), fake) as b:
            await log_in(a)
            b.cookies.set(COOKIE, a.cookies[COOKIE])   # the same login, through the other replica
            fragment = (await run(a, htmx=True, query="Who?", mode="bypass", answer="1")).text
            url = must_find(r'data-answer-stream="(/admin/playground/answer/[^"]+)"', fragment).group(1)
            stream = await b.get(url)
            assert stream.status_code == 200 and "event: done" in stream.text
            assert "Hello from" in stream.text   # the fake model's answer, streamed by the other replica
            assert (await a.get(url)).status_code == 404   # taken once, wherever it was asked
            again = must_find(r'data-answer-stream="(/admin/playground/answer/[^"]+)"',
                              (await run(a, htmx=True, query="Who?", mode="bypass", answer="1")).text).group(1)
            b.cookies.clear()
            await log_in(b)   # another session: not its answer
            assert (await b.get(again)).status_code == 404
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            for schema in base_schemas(pg_server) - before:
                drop(con, schema)


# --- knowledge bases: settings, deletion and a name made again, through another replica ---

@pytest.mark.anyio
async def test_a_bases_settings_deletion_and_remaking_reach_the_other_replica(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, pg_server: str, tmp_path: Path) -> None:
    before = base_schemas(pg_server)
    shared = settings.replace(store=pg_server)
    try:
        async with gateway_client(shared.replace(data_dir=tmp_path / "a"), fake) as a, \
                gateway_client(shared.replace(data_dir=tmp_path / "b"), fake) as b:
            async def detail_on_b() -> dict[str, Any] | None:
                response = await b.get("/rag/kbs/team")
                return response.json() if response.status_code == 200 else None

            async def until(check: Any) -> Any:
                with anyio.fail_after(FOLLOW_SECONDS):
                    while not (answer := await check()):
                        await anyio.sleep(0.02)
                return answer

            await create(a, "team")
            await upload(a, "team", "team.txt", TEAM)
            first = await until(detail_on_b)
            assert await names_of_documents(b, params={"kb": "team"}) == ["team.txt"]   # open on b now
            assert (await a.patch("/rag/kbs/team", json={"settings": {"language": "French"}})).status_code == 200
            changed = await until(lambda: _settings_are(b, {"language": "French"}))
            assert changed["effective"]["language"] == "French"
            assert (await b.delete("/rag/kbs/team", params={"confirm": "team"})).status_code == 200
            await until(lambda: _absent(a, "team"))
            assert (await a.get("/rag/documents", params={"kb": "team"})).status_code == 404
            # made again through b: another base, empty, on both (a's old directory went with the deletion)
            async def a_directory_gone() -> bool:
                return not (tmp_path / "a" / "kbs" / "team").exists()

            await until(a_directory_gone)
            await create(b, "team")

            async def detail_on_a() -> dict[str, Any] | None:
                response = await a.get("/rag/kbs/team")
                return response.json() if response.status_code == 200 else None

            again = await until(detail_on_a)
            assert again["created_at"] >= first["created_at"] and again["settings"] == {}
            assert await names_of_documents(a, params={"kb": "team"}) == []
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            for schema in base_schemas(pg_server) - before:
                drop(con, schema)


async def _settings_are(client: httpx.AsyncClient, wanted: dict[str, Any]) -> dict[str, Any] | None:
    response = await client.get("/rag/kbs/team")
    return response.json() if response.status_code == 200 and response.json()["settings"] == wanted else None


async def _absent(client: httpx.AsyncClient, name: str) -> bool:
    return name not in [b["name"] for b in (await client.get("/rag/kbs")).json()["kbs"]]


# --- a store moved to PostgreSQL keeps its bases, keys and knowledge models ---

@pytest.mark.anyio
async def test_a_store_moved_by_migrate_store_keeps_its_bases_keys_and_models(
        settings: Settings, fake: FakeOllama, facts: KnownFacts, pg_server: str,
        caplog: pytest.LogCaptureFixture) -> None:
    before = base_schemas(pg_server)
    try:
        async with gateway_client(settings, fake) as client:   # one machine, the embedded store
            await create(client, "team")
            await upload(client, "team", "team.txt", TEAM)
            put = await client.put("/rag/models/team-bot", json={"model": "llama3.2", "kb": "team"})
            assert put.status_code == 201, put.text
            made = await client.post("/rag/keys", json={"name": "reader", "role": "read", "kbs": ["team"]})
            token = made.json()["token"]
        moved = settings.replace(store=pg_server)   # as in the compose: GRAPHGATE_STORE names the target
        await anyio.to_thread.run_sync(lambda: to_postgres(moved, pg_server))
        with caplog.at_level("INFO", logger="graphgate"):
            async with gateway_client(moved, fake) as client:
                reader = {"authorization": f"Bearer {token}"}
                assert await names_of_documents(client, params={"kb": "team"}, headers=reader) == ["team.txt"]
                assert (await client.get("/rag/stats", headers=reader)).status_code == 404   # default: not its base
                assert (await client.get("/rag/models/team-bot", headers=reader)).json()["kb"] == "team"
        assert sum("imported" in r.getMessage() for r in caplog.records) == 3   # bases, keys, knowledge models
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            for schema in base_schemas(pg_server) - before:
                drop(con, schema)


@pytest.mark.anyio
async def test_the_follower_reconnects_after_a_postgresql_restart(tmp_path: Path, pg_server: str) -> None:
    lists_a, lists_b = PgLists(pg_server, tmp_path / "a"), PgLists(pg_server, tmp_path / "b")
    keys_a, keys_b = await KeyStore.open(tmp_path / "a", lists_a), await KeyStore.open(tmp_path / "b", lists_b)
    async with following(lists_b, {KEYS: keys_b}):
        await anyio.sleep(0.2)   # listening
        await anyio.to_thread.run_sync(restart_pg, pg_server)
        key, token = await keys_a.create("after", "read", None, ["default"])
        with anyio.fail_after(FOLLOW_SECONDS + 5):   # the reconnection's back-off, then the poll
            while keys_b.verify(token) is None:
                await anyio.sleep(0.02)
