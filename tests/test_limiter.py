"""The priority limiter: chat-time calls first, but never starving ingestion; bounded waits."""

from __future__ import annotations

import anyio
import pytest

from proxy.core.limiter import Busy, Priority, PriorityLimiter

pytestmark = pytest.mark.anyio


async def run_order(capacity: int, arrivals: list[Priority], hold: float = 0.01) -> list[str]:
    """Occupy every slot, queue ``arrivals`` in order, then record the order in which they run."""
    limiter = PriorityLimiter(capacity)
    order: list[str] = []
    release = anyio.Event()

    async def blocker() -> None:
        async with limiter.slot(Priority.CHAT):
            await release.wait()

    async def call(name: str, priority: Priority) -> None:
        async with limiter.slot(priority):
            order.append(name)
            await anyio.sleep(hold)

    async with anyio.create_task_group() as group:
        for _ in range(capacity):
            group.start_soon(blocker)
        await anyio.sleep(0.01)
        for i, priority in enumerate(arrivals):
            group.start_soon(call, f"{priority.name.lower()}{i}", priority)
            await anyio.sleep(0.001)
        assert limiter.waiting == len(arrivals)
        release.set()
    assert limiter.running == 0 and limiter.background_running == 0
    return order


async def test_chats_go_first_when_nothing_else_waits() -> None:
    assert await run_order(1, [Priority.CHAT, Priority.CHAT]) == ["chat0", "chat1"]


async def test_a_chat_waits_for_at_most_one_background_call() -> None:
    arrivals = [Priority.INGEST] * 5 + [Priority.CHAT]
    order = await run_order(1, arrivals)
    assert order.index("chat5") <= 1  # one extraction may take the slot first, never the whole queue


async def test_background_work_is_not_starved_by_a_stream_of_chats() -> None:
    arrivals = [Priority.INGEST, Priority.INGEST] + [Priority.CHAT] * 8
    order = await run_order(1, arrivals)
    # the two extraction calls run among the first four turns, alternating with chats
    assert order.index("ingest0") < 4 and order.index("ingest1") < 6, order
    chats = [name for name in order if name.startswith("chat")]
    assert chats == [f"chat{i}" for i in range(2, 10)]  # first come first served within a priority


async def test_with_two_slots_the_background_keeps_one() -> None:
    arrivals = [Priority.INGEST] * 3 + [Priority.CHAT] * 6
    order = await run_order(2, arrivals)
    assert order[:2] == ["ingest0", "chat3"]  # one slot each while both wait
    assert order.index("ingest2") < 8, order  # ingestion moved on while chats were still queued


async def test_summaries_go_before_extraction() -> None:
    order = await run_order(1, [Priority.INGEST, Priority.SUMMARY])
    assert order == ["summary1", "ingest0"]


async def test_a_bounded_wait_gives_up_with_busy_and_leaves_the_queue() -> None:
    limiter = PriorityLimiter(1)
    async with limiter.slot(Priority.INGEST):
        with pytest.raises(Busy, match="within 0.05 s"):
            async with limiter.slot(Priority.CHAT, wait=0.05):
                pass
        assert limiter.waiting == 0
    assert limiter.running == 0
    async with limiter.slot(Priority.CHAT, wait=0.05):  # a free slot is taken at once
        assert limiter.running == 1


async def test_a_waiter_cancelled_in_the_queue_leaves_it() -> None:
    limiter = PriorityLimiter(1)
    done: list[str] = []
    inner = anyio.CancelScope()

    async def call(name: str) -> None:
        async with limiter.slot(Priority.INGEST):
            done.append(name)

    async def cancellable() -> None:
        with inner:
            await call("cancelled")

    async with anyio.create_task_group() as group:
        async with limiter.slot(Priority.CHAT):
            group.start_soon(cancellable)
            await anyio.sleep(0.01)
            group.start_soon(call, "second")
            await anyio.sleep(0.01)
            assert limiter.waiting == 2
            inner.cancel()
            await anyio.sleep(0.01)
            assert limiter.waiting == 1
    assert done == ["second"] and limiter.running == 0


async def test_a_bounded_wait_gives_up_at_once_when_the_queue_is_already_full() -> None:
    limiter = PriorityLimiter(1)
    async with anyio.create_task_group() as group, limiter.slot(Priority.INGEST):
        group.start_soon(_hold, limiter)  # one chat-time call already queued: as many as there are slots
        await anyio.sleep(0.01)
        # at once: a wait of its 60 s would be ended by the guard's 10 s (it would raise TimeoutError)
        with anyio.fail_after(10), pytest.raises(Busy, match="already wait"):
            async with limiter.slot(Priority.CHAT, wait=60):
                pass
        assert limiter.waiting == 1


async def _hold(limiter: PriorityLimiter) -> None:
    async with limiter.slot(Priority.CHAT):
        pass
