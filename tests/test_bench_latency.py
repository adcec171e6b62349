"""bench.latency's percentile: nearest rank, exact at the edges (99.9 % of 1,000 values is the 999th)."""

from __future__ import annotations

import pytest

from bench.latency import percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert [percentile(values, q) for q in (0, 50, 99, 99.9, 100)] == [1, 500, 990, 999, 1000]
    assert percentile([7.0], 99.9) == 7.0
    assert (percentile([1.0, 2.0], 50), percentile([1.0, 2.0], 51)) == (1.0, 2.0)
    with pytest.raises(ValueError):
        percentile([], 50)
