"""SIGTERM: a real graphgate process shuts down gracefully, with work in flight, without waiting for it.

Ingestion is checkpointed, not finished: every chunk extraction the model has answered is
committed before the process exits (only the calls still waiting for the model are dropped, at
most GRAPHGATE_LLM_CONCURRENCY of them), a document merge already committing completes, the
vector indexes are saved at the committed generation, and no document is marked failed. After a
restart the interrupted documents resume from their checkpoint and finish, and no chunk whose
extraction was stored is sent to the model again. A streaming chat in progress is ended (uvicorn
cuts what is still running when its graceful-shutdown timeout expires) and the process still
exits, long before the chat would have ended on its own.

No test bounds the seconds from the signal to the exit (a loaded machine stretches them): the
checkpoint is checked by what was stored and left undone, the cut by a chat far longer than the
harness's 30 s wait for the exit. bench/reaction_times.py measures the seconds (about the 5 s grace
with a chat open, about a second without).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import anyio
import duckdb
import httpx
import pytest

from proxy.store.batching import BatchWriter
from tests.invariants import check_store
from tests.reliability_harness import (
    GRACEFUL_EXIT_CODES,
    Gateway,
    ScriptedUpstream,
    read_state,
    saved_generations,
    wait_until,
)

CONCURRENCY = 2     # GRAPHGATE_LLM_CONCURRENCY: model calls that can be in flight at the signal


def generation(data_dir: Path) -> str:
    con = duckdb.connect(str(data_dir / "graphgate.duckdb"), read_only=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return row[0] if row else "0"
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["extraction", "document merge"])
def test_sigterm_checkpoints_ingestion_and_a_restart_resumes_it(tmp_path: Path, moment: str) -> None:
    upstream = ScriptedUpstream(reply_delay=0.25)
    data = tmp_path / "data"
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=tmp_path / "gateway.log",
                          env={"GRAPHGATE_LLM_CONCURRENCY": str(CONCURRENCY)}).start()
        with gateway:
            ids = gateway.upload(*range(4))
            if moment == "extraction":
                wait_until(lambda: len(upstream.extractions()) >= 5, 30, "five extraction calls", interval=0.005)
            else:  # the first document's merge is embedding its chunks, under the merge lock
                wait_until(lambda: upstream.count("/api/embed") >= 1, 30, "a merge", interval=0.002)
            code, _ = gateway.terminate()
        mark = upstream.mark
        assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
        assert not gateway.log_errors(), gateway.log_tail()
        assert "failed" not in gateway.log_path.read_text()

        stopped = read_state(data)  # the dead process's files, as the shutdown left them
        assert set(stopped.documents) == ids
        assert all(d["status"] in ("pending", "processing", "processed") for d in stopped.documents.values())
        assert saved_generations(data) <= {generation(data)}  # every saved index matches the tables
        asked = upstream.extraction_counts(0, mark)
        dropped = set(asked) - stopped.extracted  # asked for, but not stored: cancelled in flight
        print("DROPPED", len(dropped), len(asked), stopped.status_counts())
        assert len(dropped) <= CONCURRENCY, f"{len(dropped)} answered extractions were lost at shutdown"
        assert stopped.status_counts().get("processed", 0) < len(ids), "nothing was in flight"
        for row in stopped.documents.values():  # progress is recorded as the checkpoint says
            assert row["status"] == "processed" or row["done"] <= row["total"]

        gateway = Gateway(data, upstream.url, log_path=tmp_path / "gateway.log").start()
        with gateway:
            documents = gateway.wait_processed(ids, timeout=60)
            gateway.check_live_stats()
            code, _ = gateway.terminate()
        assert code in GRACEFUL_EXIT_CODES

    after = upstream.extractions(mark)
    again = [c for _, c in after if c in stopped.extracted]
    assert not again, f"{len(again)} chunks extracted again after a graceful stop had stored them"
    assert len(after) == len({c for _, c in after}), "a chunk was extracted twice after the restart"
    final = read_state(data)
    assert set(asked) | {c for _, c in after} == final.extracted
    assert sum(d["chunks_total"] for d in documents) == len(final.extracted)
    check_store(data)
    # merged exactly once: each relation's weight is its number of source chunks (no curation here)
    assert final.relations and all(r["weight"] == len(r["sources"]) for r in final.relations.values())


@pytest.mark.slow
def test_sigterm_during_a_streaming_chat_ends_it_and_exits_in_time(tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    upstream.fake.reply = [f"word{i} " for i in range(600)]
    upstream.fake.chunk_delay = 0.5  # a 300 s answer: an exit within terminate()'s 30 s wait cut it
    received: list[bytes] = []
    outcome: dict[str, object] = {}

    def chat(url: str) -> None:
        body = {"model": "llama3.2", "messages": [{"role": "user", "content": "Tell me a long story."}]}
        try:
            with httpx.stream("POST", url + "/api/chat", json=body, timeout=60) as response:
                outcome["status"] = response.status_code
                for line in response.iter_lines():
                    received.append(line.encode())
            outcome["end"] = "closed"
        except httpx.HTTPError as exc:
            outcome["end"] = type(exc).__name__

    with upstream.serve():
        gateway = Gateway(tmp_path / "data", upstream.url, log_path=tmp_path / "gateway.log").start()
        with gateway:
            reader = threading.Thread(target=chat, args=(gateway.url,), daemon=True)
            reader.start()
            wait_until(lambda: len(received) >= 2, 30, "the stream's first lines")
            code, _ = gateway.terminate()
        reader.join(30)
    assert code in GRACEFUL_EXIT_CODES, gateway.log_tail()
    assert not reader.is_alive(), "the chat stream was left hanging"
    assert outcome["status"] == 200
    assert len(received) < len(upstream.fake.reply), "the stream was not cut: it ran to the end"
    check_store(tmp_path / "data")


class _Recorder:
    """Stands in for the Database: BatchWriter only calls ``write(apply, items)``."""

    def __init__(self) -> None:
        self.committed: list[int] = []

    async def write(self, apply, items):
        apply(None, items)


@pytest.mark.anyio
async def test_a_cancelled_batch_writer_commits_what_it_was_handed() -> None:
    """At shutdown the pipeline's task group is cancelled; extractions already answered by the model
    and handed to the writer must still be committed, or a restart pays for them again."""
    db = _Recorder()
    # the recorder stands in for the Database: the writer only calls its write()
    writer: BatchWriter[int] = BatchWriter(db, lambda con, items: db.committed.extend(items),  # type: ignore[arg-type]
                                           max_delay=5)
    async with anyio.create_task_group() as group:
        group.start_soon(writer.run)
        await anyio.sleep(0.01)
        pending = writer.submit(1)
        writer.submit(2)
        await anyio.sleep(0.05)  # the writer now waits for more items to join the batch
        group.cancel_scope.cancel()
    assert db.committed == [1, 2]
    await pending.wait()


def test_ctrl_c_shuts_down_and_exits_cleanly_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the terminal that runs ``graphgate serve`` is SIGINT: a graceful shutdown, exit 0,
    no traceback (uvicorn re-raises the signal once it has shut down)."""
    upstream = ScriptedUpstream()
    with upstream.serve():
        gateway = Gateway(tmp_path / "data", upstream.url, log_path=tmp_path / "gateway.log").start()
        with gateway:
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGINT)
            code = gateway.process.wait(60)
    log = gateway.log_tail(200)
    assert code == 0, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert not (tmp_path / "data" / "serving.json").exists()   # removed by the shutdown, not left behind
