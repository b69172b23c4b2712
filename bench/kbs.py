"""What knowledge bases cost (issue 20's Numbers): the memory of N idle open bases, and the start-up
time with 1 base against 100 (bases open lazily, so it should not grow).

In-process, over the fake Ollama of the tests (answering extraction like a perfect model on the test
corpus), each base in its own directory under a temporary data directory:

1. start a gateway, make N bases and give each one small document (the test corpus's TEAM text), so
   that each has tables, vectors, a graph and caches; wait until every base has closed (idle);
2. open them all (a lease each, as a request takes) and read the process's RSS before and after: the growth over N
   is what an idle open base costs; then let the idle timeout close them and read RSS again;
3. time the gateway's start-up (its lifespan, up to serving) over a data directory with 1 base and
   over one with 100 bases, several times each (best and median).

    python bench/kbs.py [--bases 100] [--starts 5]

Target: <= 30 MB per idle open base; start-up independent of the number of bases.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.app import Settings, create_app  # noqa: E402 - after the path is set
from proxy.knowledge.bases import KnowledgeBases  # noqa: E402
from tests.corpus import PEOPLE, TEAM  # noqa: E402
from tests.extractor import KnownFacts  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402

IDLE_SECONDS = 3.0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def settings_for(data: Path) -> Settings:
    return Settings.load(environ={"GRAPHGATE_UPSTREAM": "http://127.0.0.1:11434", "GRAPHGATE_DATA_DIR": str(data),
                                  "GRAPHGATE_KB_IDLE_SECONDS": str(IDLE_SECONDS),
                                  "GRAPHGATE_LOG_LEVEL": "warning"})


def fake_upstream() -> FakeOllama:
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    fake.requests = type("Discard", (list,), {"append": lambda self, item: None})()  # keep memory flat
    return fake


async def settle(client: httpx.AsyncClient, kb: str, document_id: str) -> None:
    with anyio.fail_after(60):
        while True:
            document = (await client.get(f"/rag/documents/{document_id}", params={"kb": kb})).json()
            if document["status"] in ("processed", "failed"):
                return
            await anyio.sleep(0.02)


async def all_closed(bases: KnowledgeBases) -> None:
    with anyio.fail_after(IDLE_SECONDS * 10):
        while True:
            if not bases.open_count():
                return
            await anyio.sleep(0.1)


async def memory(count: int, data: Path) -> None:
    fake = fake_upstream()
    app = create_app(settings_for(data), upstream_transport=fake.transport())
    async with app.router.lifespan_context(app):
        bases = app.state.gateway.bases
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            began = time.perf_counter()
            for i in range(count + 1):   # one more: the first open pays the one-time costs, not counted
                name = f"kb-{i:03d}"
                assert (await client.post("/rag/kbs", json={"name": name})).status_code == 201
                upload = await client.post("/rag/documents", params={"kb": name},
                                           json={"name": "team.txt", "text": TEAM})
                await settle(client, name, upload.json()["documents"][0]["id"])
            print(f"made {count + 1} bases with one document each in {time.perf_counter() - began:.1f} s")
            await all_closed(bases)
            assert (await client.get("/rag/stats", params={"kb": "kb-000"})).status_code == 200   # the warm-up
            gc.collect()
            before = rss_mb()
            began = time.perf_counter()
            async with AsyncExitStack() as held:   # a lease each, so that none closes while they open
                for i in range(1, count + 1):
                    await held.enter_async_context(bases.lease(f"kb-{i:03d}"))
                opening = time.perf_counter() - began
                await anyio.sleep(1)   # their start-up work done (name indexes, suggestions): idle
                gc.collect()
                after = rss_mb()
                print(f"{count} more bases open ({bases.open_count()} in all): RSS {before:.0f} MB -> {after:.0f} MB: "
                      f"{(after - before) / count:.2f} MB per idle open base; opening took "
                      f"{opening / count * 1000:.0f} ms per base")
            await all_closed(bases)
            gc.collect()
            print(f"after the idle timeout ({IDLE_SECONDS:g} s): {bases.open_count()} open, RSS {rss_mb():.0f} MB")


async def make_bases(data: Path, count: int) -> None:
    app = create_app(settings_for(data), upstream_transport=fake_upstream().transport())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            for i in range(count):
                assert (await client.post("/rag/kbs", json={"name": f"kb-{i:03d}"})).status_code == 201


async def start_up(data: Path) -> float:
    app = create_app(settings_for(data), upstream_transport=fake_upstream().transport())
    began = time.perf_counter()
    async with app.router.lifespan_context(app):
        took = time.perf_counter() - began
        assert app.state.gateway.bases.open_count() == 0
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bases", type=int, default=100, help="idle open bases to measure (default 100)")
    parser.add_argument("--starts", type=int, default=5, help="start-ups timed per data directory (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="graphgate-bench-kbs-") as tmp:
        root = Path(tmp)
        await memory(args.bases, root / "memory")
        await make_bases(root / "one", 1)
        await make_bases(root / "hundred", 100)
        for label, data in (("1 base", root / "one"), ("100 bases", root / "hundred")):
            times = [await start_up(data) for _ in range(args.starts)]
            print(f"start-up with {label}: best {min(times) * 1000:.0f} ms, "
                  f"median {statistics.median(times) * 1000:.0f} ms ({args.starts} starts)")


if __name__ == "__main__":
    anyio.run(main)
