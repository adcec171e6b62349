"""How the items of one Spark job are dealt out to its tasks (flushes, restore ranges, verify slices).

A shared job carries the small flushes of many partitions that fell due at about the same time; every task
costs a Python worker's turn and a consumer per cluster, so the writes are packed into at most one task per core,
balanced by their estimated bytes: longest first, each to the task with the least work so far (the classic LPT
rule: its longest task is within 4/3 of the best possible). Cost: O(n log n) for n writes.

Frozen data in and out; no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def pack(weights: Sequence[int], slots: int) -> tuple[tuple[int, ...], ...]:
    """The indexes of `weights` in at most `slots` packs (none empty), each pack's indexes ascending; every index
    in exactly one pack. Weights are estimated bytes (any non-negative measure of work)."""
    if not weights:
        return ()
    count = max(1, min(slots, len(weights)))
    loads = [(0, task) for task in range(count)]  # (work so far, task): a min-heap
    packs: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        load, task = heapq.heappop(loads)
        packs[task].append(index)
        heapq.heappush(loads, (load + max(1, weights[index]), task))
    return tuple(tuple(sorted(found)) for found in packs if found)
