"""Every answered extraction call is committed before a crash can lose it (issue 16, item 3).

With gleaning on, a chunk's first pass is answered long before its gleaning pass (the gleaning
passes queue behind every other chunk's first pass). The first pass's answer is committed to the
LLM cache as it arrives, and a resumed document reuses it: a SIGKILL repeats at most the calls in
flight, never one the model had already answered.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from proxy.parsing.chunking import chunk_id
from tests.matching import must_find
from tests.reliability_harness import Gateway, ScriptedUpstream, wait_until

FIRST_PASSES = 6  # answered before the model stops answering and the process is killed


def test_sigkill_after_first_passes_repeats_none_of_them(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(reply_delay=0.05)
    fake, facts = upstream.fake, upstream.facts
    answered: list[tuple[str, str]] = []  # (extract | glean, chunk id), as the model answered them
    stop = {"after": FIRST_PASSES}  # first passes answered before the model stops (the first run only)

    def script(request: dict) -> str:
        reply = facts(request)
        kind = facts.calls[-1]
        if kind in ("extract", "glean"):
            passage = must_find(r"<<<\n(.*)\n>>>", request["messages"][-1]["content"], re.S)
            answered.append((kind, chunk_id(passage.group(1))))
            if sum(k == "extract" for k, _ in answered) >= stop["after"]:
                fake.hang_paths.add("/api/chat")  # from now on every call stays in flight
        return reply

    fake.structured = script
    data = tmp_path / "data"
    env = {"GRAPHGATE_GLEANING": "1", "GRAPHGATE_LLM_CONCURRENCY": "2"}
    with upstream.serve():
        gateway = Gateway(data, upstream.url, log_path=tmp_path / "gateway.log", env=env).start()
        with gateway:
            ids = gateway.upload(*range(4))
            wait_until(lambda: "/api/chat" in fake.hang_paths, 30, "the first passes", interval=0.005)
            before: list[tuple[str, str]] = []

            def committed() -> bool:  # every answer the model gave is in the store
                before[:] = answered
                return gateway.stats()["cache_entries"] >= len(before)

            try:
                wait_until(committed, 5, "the answered passes to be committed", interval=0.05)
            except AssertionError:
                pass  # kill anyway: what the restart asks again tells what was lost
            gateway.kill()
        assert Counter(kind for kind, _ in before)["extract"] >= FIRST_PASSES
        assert Counter(kind for kind, _ in before)["glean"] < FIRST_PASSES  # the gleaning passes were waiting

        stop["after"] = 10**9
        fake.hang_paths.discard("/api/chat")
        with Gateway(data, upstream.url, log_path=tmp_path / "gateway.log", env=env).start() as gateway:
            documents = gateway.wait_processed(ids, timeout=60)
        after = answered[len(before):]

    repeated = sorted(set(before) & set(after))
    assert not repeated, f"{len(repeated)} answered calls were sent again after the kill: {repeated}"
    # and in all, each chunk's first pass and gleaning pass answered exactly once
    chunks = sum(d["chunks_total"] for d in documents)
    counts = Counter(answered)
    assert all(n == 1 for n in counts.values()), counts.most_common(3)
    assert Counter(kind for kind, _ in counts) == {"extract": chunks, "glean": chunks}
