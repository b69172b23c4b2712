"""Issue 29 (third adversarial review), the storage items: a base first opened on a full disk
(item 6), one base's .docx starving every base's uploads (item 7), a full disk on POST /rag/kbs
(item 9, the knowledge bases' half), and one chunk's extraction reply of thousands of entities.

The full disk is a real tmpfs filled up (tests/test_disk_full.py's mechanism); the gateway is the
real app in-process over the fake Ollama."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import zipfile
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from proxy.core.settings import Settings
from tests.conftest import gateway_client
from tests.console_helpers import post
from tests.corpus import TEAM
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama
from tests.rag_helpers import upload as rag_upload
from tests.test_disk_full import fill, small_disk  # noqa: F401  (fixture)
from tests.test_parse_bombs import docx_bytes, pdf_sharing_one_content_stream

pytestmark = pytest.mark.anyio


@pytest.fixture
def disk_settings(settings: Settings, small_disk: Path) -> Settings:  # noqa: F811
    return settings.replace(data_dir=small_disk / "data")


def shows_no_path(response: httpx.Response, *paths: Path) -> None:
    """The caller is told why, never where on the server's disk."""
    for path in paths:
        assert str(path) not in response.text, response.text
    assert "/tmp/" not in response.text and "/kbs/" not in response.text, response.text


async def test_a_base_first_opened_on_a_full_disk_opens_once_there_is_room(
        disk_settings: Settings, fake: FakeOllama, small_disk: Path) -> None:  # noqa: F811
    """Item 6: its first opening on a full disk left a 0-byte graphgate.duckdb, and every later
    request (space freed, the gateway restarted) answered 503 "not a valid DuckDB database file",
    naming the absolute path."""
    async with gateway_client(disk_settings, fake) as client:
        assert (await client.post("/rag/kbs", json={"name": "a"})).status_code == 201
        filler = fill(small_disk)
        response = await client.get("/rag/documents", params={"kb": "a"})
        assert response.status_code in (503, 507), response.text
        shows_no_path(response, disk_settings.data_dir)
        filler.unlink()
        response = await client.get("/rag/documents", params={"kb": "a"})
        assert response.status_code == 200, response.text   # the same process, once there is room
    async with gateway_client(disk_settings, fake) as client:   # and after a restart
        response = await client.post("/rag/documents", params={"kb": "a"}, json={"name": "n.txt", "text": "Hello."})
        assert response.status_code == 202, response.text
        assert (await client.get("/rag/documents", params={"kb": "a"})).json()["documents"][0]["name"] == "n.txt"
    leftovers = [p.name for p in (disk_settings.data_dir / "kbs" / "a").iterdir() if ".creating" in p.name]
    assert leftovers == []


async def test_an_empty_database_file_is_made_again_and_any_other_is_left_alone(
        settings: Settings, fake: FakeOllama) -> None:
    """Item 6: the 0-byte file an earlier version left is recognised (nothing was ever written in
    it) and the database made again; a file that is not empty is never touched, and the 503 for it
    names no path."""
    async with gateway_client(settings, fake) as client:
        for name in ("empty", "junk"):
            assert (await client.post("/rag/kbs", json={"name": name})).status_code == 201
        kbs = settings.data_dir / "kbs"
        (kbs / "empty" / "graphgate.duckdb").write_bytes(b"")
        junk = b"not a database, but someone's bytes" * 1000
        (kbs / "junk" / "graphgate.duckdb").write_bytes(junk)

        response = await client.post("/rag/documents", params={"kb": "empty"}, json={"name": "n.txt", "text": "Hi."})
        assert response.status_code == 202, response.text
        assert (kbs / "empty" / "graphgate.duckdb").stat().st_size > 0

        for _ in range(2):
            response = await client.get("/rag/documents", params={"kb": "junk"})
            assert response.status_code == 503, response.text
            assert "graphgate.duckdb" in response.json()["error"], response.text   # which file, not where
            shows_no_path(response, settings.data_dir)
        assert (kbs / "junk" / "graphgate.duckdb").read_bytes() == junk
        assert sorted(p.name for p in (kbs / "junk").iterdir()) == ["graphgate.duckdb"]
        assert (await client.get("/rag/documents", params={"kb": "empty"})).status_code == 200


# --- item 7: one base's slow documents and every other base's uploads ---

def docx_of_blank_paragraphs(count: int) -> bytes:
    """The report's .docx: ``count`` blank paragraphs (a million: under 100 KB)."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "word/document.xml":
                head = data.partition(b"<w:body>")[0]
                data = head + b"<w:body>" + b"<w:p></w:p>" * count + b"</w:body></w:document>"
            archive.writestr(info.filename, data)
    return out.getvalue()


def parse_workers() -> dict[int, float]:
    """This process's parse workers (``python -m proxy.parsing.workers``): their CPU seconds by pid."""
    found = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if not proc.name.isdigit() or b"proxy.parsing.workers" not in (proc / "cmdline").read_bytes():
                continue
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == os.getpid():   # its parent
                found[int(proc.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


async def wait_for_parsing(before: dict[int, float]) -> None:
    """Until a parse worker has spent a second of CPU since ``before`` (``parse_workers()``)."""
    for _ in range(1200):
        if any(cpu - before.get(pid, 0.0) > 1.0 for pid, cpu in parse_workers().items()):
            return
        await anyio.sleep(0.05)
    raise AssertionError("no parse worker started on the slow documents")


async def upload(client: httpx.AsyncClient, kb: str, name: str, data: bytes) -> httpx.Response:
    return await client.post("/rag/documents", params={"kb": kb},
                             files=[("file", (name, data, "application/octet-stream"))])


async def test_a_docx_of_blank_paragraphs_is_refused_before_it_is_built(settings: Settings, fake: FakeOllama) -> None:
    """Item 7: the report's .docx (a million blank paragraphs, 97 KB) held a parse worker for 90 s;
    its paragraphs are counted from the compressed XML first, and it is refused with the reason,
    not after the parse's time bound (5 s here: the old parse ran into it)."""
    bomb = docx_of_blank_paragraphs(1_000_000)
    assert len(bomb) < 100_000
    async with gateway_client(settings.replace(parse_seconds=5), fake) as client:
        response = await upload(client, "default", "blank.docx", bomb)
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert "1000000 paragraphs" in error and "blank" in error, error
        # a real document with blank lines between its paragraphs is read as ever
        fine = docx_bytes("Berlin is the capital of Germany.")
        assert (await upload(client, "default", "fine.docx", fine)).status_code == 202


async def test_one_bases_slow_documents_do_not_hold_up_another_bases_upload(
        settings: Settings, fake: FakeOllama) -> None:
    """Item 7: two slow documents of base ``a`` held both parse workers, and a 45-byte .txt into
    base ``b`` waited for one of them to end. One base never holds every worker now: the small
    file is answered while both of ``a``'s are still unanswered (being parsed, or waiting for
    ``a``'s worker). The slow documents would run into the parse's time bound (minutes); the
    test ends them by killing their workers."""
    slow = pdf_sharing_one_content_stream(2000, 20_000)   # ~1 s a page, 340 KB
    answered: dict[str, httpx.Response] = {}
    async with gateway_client(settings, fake) as client:
        for name in ("a", "b"):
            assert (await client.post("/rag/kbs", json={"name": name})).status_code == 201
        before = parse_workers()

        async def send(key: str) -> None:
            answered[key] = await upload(client, "a", f"{key}.pdf", slow)

        async with anyio.create_task_group() as group:
            group.start_soon(send, "first")
            group.start_soon(send, "second")
            await wait_for_parsing(before)
            await anyio.sleep(0.5)   # the second has reached the workers too (it needs no time of its own)
            small = await upload(client, "b", "note.txt", b"Oslo is the capital of Norway, said Alfa.\n")
            assert small.status_code == 202, small.text
            assert answered == {}, {k: r.text for k, r in answered.items()}   # both still unanswered
            while len(answered) < 2:   # end the slow ones (each fails: "the parser stopped unexpectedly")
                for pid in parse_workers():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                await anyio.sleep(0.1)
        assert {r.status_code for r in answered.values()} == {400}, {k: r.text for k, r in answered.items()}
        listed = (await client.get("/rag/documents", params={"kb": "b"})).json()["documents"]
        assert [d["name"] for d in listed] == ["note.txt"]


# --- item 9, the knowledge bases' half: a full disk ---

async def described(client: httpx.AsyncClient) -> list[dict]:
    """The bases as listed, but whether each is open (a refused deletion has closed its base)."""
    return [{k: v for k, v in base.items() if k != "open"} for base in (await client.get("/rag/kbs")).json()["kbs"]]


async def test_a_full_disk_refuses_a_change_of_the_bases_with_the_reason_and_changes_nothing(
        disk_settings: Settings, fake: FakeOllama, small_disk: Path) -> None:  # noqa: F811
    """Item 9: POST /rag/kbs answered 500 on a full disk. Creating, changing and deleting a base
    (API and console) answer 503 saying why, and the list, the base and its files stay as they were."""
    registry = disk_settings.data_dir / "kbs" / "registry.json"
    async with gateway_client(disk_settings, fake) as client:
        assert (await client.post("/rag/kbs", json={"name": "kept"})).status_code == 201
        assert (await client.get("/rag/documents", params={"kb": "kept"})).status_code == 200   # its store made
        before = registry.read_bytes()
        listed = await described(client)
        filler = fill(small_disk)
        try:
            for method, path, body in (("POST", "/rag/kbs", {"name": "new"}),
                                       ("PATCH", "/rag/kbs/kept", {"settings": {"chunk_tokens": 600}}),
                                       ("DELETE", "/rag/kbs/kept?confirm=kept", None)):
                reply = await client.request(method, path, json=body)
                assert reply.status_code in (503, 507), (method, path, reply.status_code, reply.text)
                message = reply.json()["error"]
                assert "space" in message.lower() and "nothing was changed" in message, message
                shows_no_path(reply, disk_settings.data_dir)
            page = await post(client, "/admin/kbs", {"name": "new2"})
            assert page.status_code in (503, 507) and "space" in page.text.lower(), page.status_code
            assert await described(client) == listed
            assert registry.read_bytes() == before
            assert sorted(p.name for p in registry.parent.iterdir()) == ["kept", "registry.json"]
            assert (await client.get("/rag/documents", params={"kb": "kept"})).status_code == 200   # still served
        finally:
            filler.unlink()
        assert (await client.post("/rag/kbs", json={"name": "new"})).status_code == 201
        assert (await client.delete("/rag/kbs/kept", params={"confirm": "kept"})).status_code == 200


# --- also seen: one chunk's extraction reply of thousands of entities ---

FLOOD = 2_000   # the report's reply had 20,000: the same defect, a quicker test on the old code


def flooding(real: Callable[[dict], str]) -> Callable[[dict], str]:
    """The fake model: as ``real``, but a chunk that says FLOODED gets FLOOD entities and as many
    relations (its gleaning pass, nothing more)."""
    def reply(request: dict) -> str:
        user = next((m.get("content", "") for m in reversed(request["messages"]) if m.get("role") == "user"), "")
        if "FLOODED" not in user or "entities" not in ((request.get("format") or {}).get("properties") or {}):
            return real(request)
        if "already found" in user:
            return json.dumps({"entities": [], "relations": []})
        names = [f"Name {i}" for i in range(FLOOD)]
        return json.dumps({
            "entities": [{"name": n, "type": "Person", "description": f"{n} is listed."} for n in names],
            "relations": [{"source": a, "target": b, "keywords": ["listed"], "description": f"{a} precedes {b}.",
                           "weight": 1.0} for a, b in zip(names, names[1:], strict=False)]})
    return reply


async def processed(client: httpx.AsyncClient, document_id: str) -> dict:
    for _ in range(3000):   # the old code took long to merge the flood: a wait, not a bound
        document = (await client.get(f"/rag/documents/{document_id}")).json()
        if document["status"] in ("processed", "failed"):
            return document
        await anyio.sleep(0.05)
    raise AssertionError(f"document {document_id} was not processed")


async def test_one_chunks_flood_of_entities_is_cut_to_its_cap_and_the_document_says_so(
        settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    """A reply of 20,000 entities for one chunk was taken whole (a minute to merge). A chunk keeps
    at most one entity per token of its text (and two relations), the rest is counted, and the
    document's error field says what was left out; a real model's reply on a normal chunk is
    taken whole and its document says nothing."""
    fake.structured = flooding(facts)
    async with gateway_client(settings, fake) as client:
        normal = await rag_upload(client, "team.md", TEAM)
        flooded = await rag_upload(client, "ledger.md", "The FLOODED ledger lists many names, one per line.")
        flooded = await processed(client, flooded["id"])
        normal = await processed(client, normal["id"])
        assert normal["status"] == "processed" and normal["error"] is None, normal
        assert flooded["status"] == "processed", flooded
        assert flooded["error"] and "left out" in flooded["error"], flooded
        for name in ("Alice Smith", "Orion", "Acme Corp", "Bob Jones"):   # the real reply, whole
            assert (await client.get(f"/rag/entities/{name}")).status_code == 200, name
        kept = (await client.get("/rag/stats")).json()["entities"] - 4
        assert 0 < kept <= FLOOD // 10, kept   # cut to the chunk's cap: a few dozen, not thousands
        assert (await client.get("/rag/entities/Name 0")).status_code == 200   # the reply's first ones are kept
        assert (await client.get(f"/rag/entities/Name {FLOOD - 1}")).status_code == 404
        assert f"{FLOOD - kept} entities" in flooded["error"], flooded["error"]


@pytest.mark.parametrize("broken", ["keys.json", "models.json"])
async def test_a_server_error_names_the_file_but_never_where_the_data_directory_is(
        settings: Settings, fake: FakeOllama, broken: str) -> None:
    """Item 6's other half, for every 5xx: a list that cannot be read (here a directory where its
    file should be) is a 503 naming the file, relative to the data directory."""
    settings.data_dir.mkdir(parents=True)
    (settings.data_dir / broken).mkdir()
    admin = {"authorization": "Bearer the-admin-key"}   # a keys file that cannot be read closes the API
    async with gateway_client(settings.replace(api_key="the-admin-key"), fake) as client:
        reply = await (client.post("/rag/keys", json={"name": "k", "role": "read"}, headers=admin)
                       if broken == "keys.json"
                       else client.put("/rag/models/m", json={"model": "llama3.2"}, headers=admin))
        assert reply.status_code == 503, reply.text
        assert broken in reply.text, reply.text
        assert str(settings.data_dir) not in reply.text and os.path.realpath(settings.data_dir) not in reply.text  # noqa: ASYNC240 - no I/O of note
