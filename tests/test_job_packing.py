"""How a shared job's writes are dealt out to its tasks."""

from __future__ import annotations

import random

from workers.job_packing import pack


def test_every_write_is_in_exactly_one_task_and_no_task_is_empty() -> None:
    rng = random.Random(3)
    for _ in range(200):
        weights = [rng.randint(0, 10_000) for _ in range(rng.randint(0, 300))]
        slots = rng.randint(1, 16)
        packs = pack(weights, slots)
        assert sorted(i for found in packs for i in found) == list(range(len(weights)))
        assert len(packs) == min(slots, len(weights)) and all(packs)
        assert all(list(found) == sorted(found) for found in packs)


def test_the_work_is_balanced_within_the_longest_write() -> None:
    rng = random.Random(5)
    for _ in range(200):
        weights = [rng.randint(1, 1_000) for _ in range(rng.randint(1, 300))]
        slots = rng.randint(1, 8)
        loads = [sum(weights[i] for i in found) for found in pack(weights, slots)]
        # Longest first to the least loaded task: no task exceeds another by more than one write.
        assert max(loads) - min(loads) <= max(weights)


def test_one_large_write_gets_a_task_of_its_own() -> None:
    assert pack([100, 1, 1, 1, 1], 2) == ((0,), (1, 2, 3, 4))
    assert pack([5], 4) == ((0,),)
    assert pack([], 4) == ()
