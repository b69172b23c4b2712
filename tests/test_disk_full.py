"""Disk full: the data directory on a real, small tmpfs that fills up while GraphGate runs.

A real ``graphgate serve`` process ingests a document, then the rest of the file system is taken by
a filler file, so every write of DuckDB, the WAL and the vector indexes gets ENOSPC from the kernel
(no simulated error). While the disk is full:

* chats still work: plain proxying, and augmented turns (retrieval only reads);
* an upload is either refused with a readable 5xx naming the lack of space, or accepted and then
  failed with a readable error: never a stack trace, never a hang;
* the process stays up.

Then space is freed and the process restarted (DuckDB refuses further writes on a connection that
hit a write error until it is reopened): the store passes every cross-store invariant, the first
document is intact, and the second one can be ingested (retried or uploaded again) to ``processed``.

The mount needs root; CI runs as root.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.invariants import check_store
from tests.reliability_harness import (
    GRACEFUL_EXIT_CODES,
    Gateway,
    ScriptedUpstream,
    document,
    read_state,
    wait_until,
)

DISK_MB = 48
SPACE_WORDS = ("no space", "disk", "space left", "storage")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and must run as root (CI does)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file; returns it."""
    filler = disk / "filler"
    block = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(block)
        except OSError:  # ENOSPC: the disk is full
            pass
    # smaller writes may still fit in the last partial block: take those too
    with open(filler, "ab", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 512)
        except OSError:
            pass
    assert os.statvfs(disk).f_bavail == 0
    return filler


def readable(message: str) -> bool:
    return any(word in message.lower() for word in SPACE_WORDS) and "Traceback" not in message


def answer(response: httpx.Response) -> str:
    return "".join(json.loads(line)["message"]["content"] for line in response.text.splitlines())


def status_of(gateway: Gateway, document_id: str, status: str) -> dict | None:
    found = httpx.get(f"{gateway.url}/rag/documents/{document_id}", timeout=10).json()
    return found if found.get("status") == status else None


def chat(url: str, *, stream: bool) -> httpx.Response:
    body = {"model": "llama3.2", "stream": stream,
            "messages": [{"role": "user", "content": "What did Alfa talk about?"}]}
    return httpx.post(url + "/api/chat", json=body, timeout=30)


@pytest.mark.slow
def test_a_full_disk_keeps_chats_working_fails_ingestion_readably_and_corrupts_nothing(
        small_disk: Path, tmp_path: Path) -> None:
    upstream = ScriptedUpstream(reply_delay=0.01)
    data = small_disk / "data"
    log = tmp_path / "gateway.log"  # not on the full disk: what the process says must be readable
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=log).start()
        with gateway:
            [first] = gateway.upload(0)
            gateway.wait_processed({first}, timeout=60)
            gateway.terminate()
        before = read_state(data)  # the files are free while no process runs

        gateway = Gateway(data, upstream.url, log_path=log).start()
        with gateway:
            filler = fill(small_disk)
            for stream in (False, True):
                response = chat(gateway.url, stream=stream)
                assert response.status_code == 200, response.text
                assert answer(response) == "Hello from the fake model."
                sent = upstream.fake.requests[-1].json
                assert sent["messages"][0]["role"] == "system" and "doc000.md" in sent["messages"][0]["content"]

            second_name, second_text = document(1)
            second = {"name": second_name, "text": second_text}
            response = httpx.post(gateway.url + "/rag/documents", json=second, timeout=30)
            # a document is stored before it is acknowledged: with no room, no acknowledgement
            assert response.status_code == 507, response.text
            assert readable(response.json()["error"]), response.text
            listed = httpx.get(gateway.url + "/rag/documents", timeout=30)
            assert listed.status_code == 200 and [d["id"] for d in listed.json()["documents"]] == [first]
            assert chat(gateway.url, stream=False).status_code == 200  # still up and answering
            page = httpx.get(gateway.url + "/admin/documents", timeout=30)
            assert page.status_code == 200 and "doc000.md" in page.text

            filler.unlink()  # space again: the same process takes the document now
            response = httpx.post(gateway.url + "/rag/documents", json=second, timeout=30)
            assert response.status_code == 202, response.text
            ids = {first, response.json()["documents"][0]["id"]}
            gateway.wait_processed(ids, timeout=60)
            gateway.check_live_stats()

            # the disk fills up while a document is being extracted: it fails, readably, and a retry
            # after space is freed finishes it
            upstream.fake.reply_delay = 0.3
            third_name, third_text = document(2)
            response = httpx.post(gateway.url + "/rag/documents", json={"name": third_name, "text": third_text},
                                  timeout=30)
            assert response.status_code == 202, response.text
            third = response.json()["documents"][0]["id"]
            wait_until(lambda: upstream.extractions(), 30, "the first extraction call")
            filler = fill(small_disk)
            failed = wait_until(lambda: status_of(gateway, third, "failed"), 60, "the document to fail")
            assert readable(failed["error"]), failed
            agree(gateway)
            filler.unlink()
            upstream.fake.reply_delay = 0.01
            retried = httpx.post(f"{gateway.url}/rag/documents/{third}/retry", timeout=30)
            assert retried.status_code in (200, 202), retried.text
            ids.add(third)
            gateway.wait_processed(ids, timeout=60)
            gateway.check_live_stats()
            code, _ = gateway.terminate()
            assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
        assert not gateway.log_errors(), gateway.log_tail()

        check_store(data)
        after = read_state(data)
        assert after.status_counts() == {"processed": 3}
        assert after.documents[first] == before.documents[first]
        assert after.links[first] == before.links[first]
        first_only = {k for k, v in after.entities.items() if set(v["sources"]) <= set(before.links[first])}
        assert {k: after.entities[k] for k in first_only} == {k: before.entities[k] for k in first_only}

        gateway = Gateway(data, upstream.url, log_path=log).start()  # and it starts again on those files
        with gateway:
            gateway.wait_processed(ids, timeout=30)
            gateway.check_live_stats()
            gateway.terminate()


def fill_but(disk: Path, spare: int) -> Path:
    """Fill ``disk``, then give back ``spare`` bytes: room for a few small writes, not a checkpoint."""
    filler = fill(disk)
    os.truncate(filler, max(0, filler.stat().st_size - spare))
    return filler


def agree(gateway: Gateway) -> None:
    """/rag/stats and /rag/health count the documents as /rag/documents shows them (a failure the
    full disk would not take included)."""
    listed = dict(Counter(d["status"] for d in gateway.documents()))
    stats = {k: v for k, v in gateway.stats()["documents"].items() if v}
    assert stats == listed, (stats, listed)
    counted = {k: v for k, v in health(gateway)["store"]["documents"].items() if v and k != "total"}
    assert counted == listed, (counted, listed)


def health(gateway: Gateway) -> dict:
    return httpx.get(gateway.url + "/rag/health", timeout=30).json()


@pytest.mark.slow
def test_a_checkpoint_on_a_full_disk_does_not_kill_the_store(small_disk: Path, tmp_path: Path) -> None:
    """DuckDB invalidates its database when a checkpoint hits a full disk; GraphGate reopens it
    (from its file and log) without a restart: /rag and the console never answer 500, a retry
    finishes once there is room, and nothing committed is lost (issue 16, item 1)."""
    upstream = ScriptedUpstream(reply_delay=0.01)
    data = small_disk / "data"
    log = tmp_path / "gateway.log"
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=log).start()
        with gateway:
            [first] = gateway.upload(0)
            gateway.wait_processed({first}, timeout=60)
            wait_until(lambda: not health(gateway)["pipeline"]["working"], 30, "the pipeline to go idle")

            # room for the log of a small document, not for the checkpoint the idle pipeline then makes
            filler = fill_but(small_disk, 96 * 1024)
            second_name, second_text = document(1)
            response = httpx.post(gateway.url + "/rag/documents", json={"name": second_name, "text": second_text},
                                  timeout=30)
            assert response.status_code in (202, 507), response.text
            wait_until(lambda: "Failed to create checkpoint" in log.read_text(), 60, "the checkpoint to fail")

            # never a 500, while the disk is still full
            for path in ("/rag/documents", "/rag/stats", "/rag/pipeline", "/rag/traces", "/admin/",
                         "/admin/documents"):
                response = httpx.get(gateway.url + path, timeout=30)
                assert response.status_code in (200, 503, 507), (path, response.status_code, response.text[:300])
            report = health(gateway)
            assert report["store"]["reopened"] >= 1 and "invalidated" in log.read_text(), report
            third_name, third_text = document(2)
            third = {"name": third_name, "text": third_text}
            response = httpx.post(gateway.url + "/rag/documents", json=third, timeout=30)
            assert response.status_code in (202, 507), response.text
            if response.status_code == 507:
                assert readable(response.json()["error"]), response.text

            # the two reads below must not straddle the accepted document's own progress
            wait_until(lambda: not health(gateway)["pipeline"]["working"], 60, "the pipeline to go idle")
            agree(gateway)

            filler.unlink()  # space again: the same process, no restart
            # (from the whole list: ?status=failed filters on the stored status, and a failure the full
            # disk refused is only in memory)
            for document_ in [d for d in gateway.documents() if d["status"] == "failed"]:
                retried = httpx.post(f"{gateway.url}/rag/documents/{document_['id']}/retry", timeout=30)
                assert retried.status_code in (200, 202), retried.text
            response = httpx.post(gateway.url + "/rag/documents", json=third, timeout=30)
            # new if the full disk refused it before (507); a duplicate if it was stored then (and retried)
            outcome = response.json()["documents"][0]["outcome"]
            assert (response.status_code, outcome) in ((202, "accepted"), (200, "duplicate")), response.text
            ids = {d["id"] for d in gateway.documents()}
            assert len(ids) == 3
            gateway.wait_processed(ids, timeout=60)
            gateway.check_live_stats()
            assert httpx.get(gateway.url + "/admin/documents", timeout=30).status_code == 200
            report = health(gateway)
            assert report["store"]["invalidated"] is False and report["status"] == "ok", report
            code, _ = gateway.terminate()
            assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
        stopped = read_state(data)

        check_store(data)
        assert stopped.status_counts() == {"processed": 3}
        gateway = Gateway(data, upstream.url, log_path=log).start()  # nothing committed was lost
        with gateway:
            gateway.wait_processed(ids, timeout=30)
            gateway.check_live_stats()
            gateway.terminate()
        assert read_state(data).entities == stopped.entities



@pytest.mark.slow
def test_stats_agree_with_documents_while_a_failure_cannot_be_recorded(small_disk: Path, tmp_path: Path) -> None:
    """A document fails while the disk takes no write at all, not even its failure: /rag/documents
    shows the failure from memory, and /rag/stats and /rag/health count it the same way (they said
    "processing")."""
    upstream = ScriptedUpstream(reply_delay=0.01)
    data = small_disk / "data"
    log = tmp_path / "gateway.log"
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=log).start()
        with gateway:
            upstream.fake.hang_paths.add("/api/chat")  # the document stays unfinished
            name, text = document(0)
            response = httpx.post(gateway.url + "/rag/documents", json={"name": name, "text": text}, timeout=30)
            assert response.status_code == 202, response.text
            doc = response.json()["documents"][0]["id"]
            wait_until(lambda: upstream.extractions(), 30, "the first extraction call")
            code, _ = gateway.terminate()  # the shutdown checkpoints: the log is empty, no slack left in it
            assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
        upstream.fake.hang_paths.discard("/api/chat")
        filler = fill(small_disk)
        gateway = Gateway(data, upstream.url, log_path=log).start()
        with gateway:
            wait_until(lambda: status_of(gateway, doc, "failed"), 60, "the resumed document to fail")
            assert health(gateway)["store"]["unrecorded_failures"] == 1, gateway.log_tail()
            agree(gateway)
            filler.unlink()
            retried = httpx.post(f"{gateway.url}/rag/documents/{doc}/retry", timeout=30)
            assert retried.status_code in (200, 202), retried.text
            gateway.wait_processed({doc}, timeout=60)
            agree(gateway)
