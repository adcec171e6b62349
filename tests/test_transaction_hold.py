"""An open transaction at the source holds a caught-up mirror at the last stable offset: told apart from lag 0."""

from __future__ import annotations

from supervisor.transaction_hold import TransactionHold


def test_a_caught_up_mirror_behind_an_open_transaction_is_held_since_the_lso_stopped_there() -> None:
    hold = TransactionHold()
    hold.observe(last_stable=100, high_watermark=150, position=80, now=10.0)
    assert hold.since is None and hold.seconds(11.0) == 0.0  # behind the LSO: lagging, not held
    hold.observe(last_stable=100, high_watermark=160, position=100, now=20.0)
    assert hold.since == 10.0  # the transaction has been open since the LSO was first seen there
    assert hold.seconds(70.0) == 60.0


def test_a_moving_lso_restarts_the_hold_and_an_ended_transaction_ends_it() -> None:
    hold = TransactionHold()
    hold.observe(100, 150, 100, now=1.0)
    hold.observe(120, 150, 120, now=5.0)  # another transaction, still open: the clock starts again
    assert hold.since == 5.0
    hold.observe(150, 150, 150, now=6.0)  # LSO reached the high watermark: nothing open
    assert hold.since is None and hold.seconds(100.0) == 0.0
    hold.observe(150, 151, 150, now=7.0)
    assert hold.since == 7.0


def test_read_uncommitted_is_never_held() -> None:
    hold = TransactionHold()
    hold.observe(last_stable=150, high_watermark=150, position=150, now=1.0)  # its end is the high watermark
    assert hold.since is None
