"""ThreadBatches: calls made together share a worker-thread trip, each caller gets its own outcome, lanes bound
the batches in flight, and a call once made runs even if its caller is cancelled."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from core.thread_batches import ThreadBatches

pytestmark = pytest.mark.anyio


async def test_calls_made_together_run_in_one_trip_and_each_gets_its_own_outcome() -> None:
    batches = ThreadBatches(lanes=1)
    threads: set[int] = set()
    results: dict[int, object] = {}
    order: list[int] = []

    def work(n: int) -> int:
        threads.add(threading.get_ident())
        order.append(n)
        if n == 3:
            raise ValueError("three")
        return n * 10

    async def call(n: int) -> None:
        try:
            results[n] = await batches.run(work, n)
        except ValueError as exc:
            results[n] = exc

    async with anyio.create_task_group() as tasks:
        for n in range(6):
            tasks.start_soon(call, n)
    assert batches.batches == 1 and len(threads) == 1 and threading.get_ident() not in threads
    assert order == list(range(6))  # in order of arrival
    assert {n: r for n, r in results.items() if n != 3} == {0: 0, 1: 10, 2: 20, 4: 40, 5: 50}
    assert isinstance(results[3], ValueError)  # one call's failure is that call's only


async def test_lanes_bound_the_batches_in_flight_and_every_call_runs() -> None:
    batches = ThreadBatches(lanes=2, batch_max=3)
    running, most, order = [0], [0], []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(n)
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return n

    got: list[int] = []

    async def call(n: int) -> None:
        got.append(await batches.run(work, n))

    async with anyio.create_task_group() as tasks:
        for n in range(20):
            tasks.start_soon(call, n)
            if n % 7 == 6:
                await anyio.sleep(0.005)  # more arrive while batches run
    assert sorted(got) == list(range(20))
    assert most[0] <= 2  # at most two lanes' batches at a time, one call at a time in each
    assert batches.batches >= 7  # at most three calls a batch


async def test_a_call_once_made_runs_and_its_caller_waits_for_it_even_when_cancelled() -> None:
    batches = ThreadBatches(lanes=1)
    ran: list[int] = []

    def work(n: int) -> None:
        time.sleep(0.05)
        ran.append(n)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(batches.run, work, 1)
        await anyio.sleep(0.01)
        with anyio.move_on_after(0.001):
            await batches.run(work, 2)  # queued behind the first batch, then cancelled
        assert ran == [1, 2]  # the cancelled caller returned only once its call had run
