"""Leases (`sinks.leases`): the liveness rule, and the contract every lease store keeps (a directory, S3 through
moto in this process, and a Kafka cluster's group offsets in memory): a free chain is taken, a live holder's is
refused with its facts, a dead or stopped holder's is taken over, of two takers exactly one wins, and a standby
takes over once the holder stops. Holders renew as a running process does (`renewing`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import sinks.kafka.leases
import sinks.leases
from sinks.filesystem.leases import HOLDERS_DIRECTORY, FilesystemLeases
from sinks.kafka.leases import KafkaLeases
from sinks.leases import Holder, HolderSightings, LeaseHeldError, LeaseLostError, Leases, LeaseStore, Sighting, is_live
from sinks.retry import RetryPolicy
from sinks.s3.leases import S3Leases
from sinks.s3.store import S3Connection
from tests.fakes import MemoryGroupOffsets, moto_settings

ME = Holder(id="me", host="here", pid=100, since=1_700_000_000.0)
RETRY = RetryPolicy(deadline_s=5)


def other(host: str = "there", pid: int = 200, id: str = "other") -> Holder:
    return Holder(id=id, host=host, pid=pid, since=1_700_000_000.0)


@pytest.mark.parametrize(
    ("seen", "runs", "live"),
    [
        (Sighting(ME, 0.0, locked=True), True, False),  # this process itself
        (Sighting(other(), 0.0, locked=True), False, True),  # a held lock proves a live process
        (Sighting(other(), None), True, False),  # no heartbeat: it stopped cleanly
        (Sighting(other(), 3.0), True, True),  # another host, renewed lately
        (Sighting(other(), 11.0), True, False),  # another host, silent for longer than the timeout
        (Sighting(other(), 3.0, locked=False), True, True),  # another host's free lock proves nothing
        (Sighting(other(host="here"), 3.0, locked=False), True, False),  # this host's free lock: dead
        (Sighting(other(host="here"), 3.0), False, False),  # this host, its pid no longer runs
        (Sighting(other(host="here"), 3.0), True, True),  # this host, its pid runs, renewed lately
        (Sighting(other(host="here", pid=100), 3.0), True, False),  # this pid: a restarted container's earlier self
    ],
)
def test_liveness(seen: Sighting, runs: bool, live: bool) -> None:
    assert is_live(seen, ME, pid_alive=lambda _: runs) is live


def test_holder_records_round_trip_and_garbage_is_no_holder() -> None:
    holder = Holder.of_this_process()
    assert Holder.decode(holder.encode()) == holder
    assert Holder.decode(holder.encode().ljust(512)) == holder  # the filesystem pads records in place
    assert Holder.decode(b"\0\0 torn") is None and Holder.decode(b'{"id": 1}') is None
    assert f"pid {holder.pid}" in holder.describe() and holder.host in holder.describe()


@dataclass
class LeaseStores:
    """One destination's lease records as several processes see them."""

    new: Callable[[], LeaseStore]


@contextlib.asynccontextmanager
async def renewing(*holders: Leases) -> AsyncIterator[None]:
    """The holders renew in the background, as `run` has them do, until the block ends."""
    async with anyio.create_task_group() as tasks:
        for leases in holders:
            tasks.start_soon(leases.keep_renewed)
        yield
        tasks.cancel_scope.cancel()


def kafka_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Kafka store's timing, scaled down (its liveness is watched, not read off a clock)."""
    monkeypatch.setattr(sinks.leases, "RENEW_EVERY_S", 0.02)
    monkeypatch.setattr(sinks.leases, "LEASE_TIMEOUT_S", 0.4)
    monkeypatch.setattr(sinks.kafka.leases, "SETTLE_S", 0.05)
    monkeypatch.setattr(sinks.kafka.leases, "WATCH_EVERY_S", 0.01)


@pytest.fixture(params=["filesystem", "s3", "kafka"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[LeaseStores]:
    if request.param == "filesystem":
        yield LeaseStores(new=lambda: FilesystemLeases(tmp_path))
        return
    if request.param == "kafka":
        kafka_timing(monkeypatch)
        cluster = MemoryGroupOffsets()
        yield LeaseStores(new=lambda: KafkaLeases(cluster, "mirror-v3", "127.0.0.1:9092"))
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    import boto3

    bucket = f"leases-{abs(hash(tmp_path)) % 10**8}"
    client: Any = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=bucket)
    settings = moto_settings(endpoint, bucket)
    made: list[S3Leases] = []

    def new() -> S3Leases:
        made.append(S3Leases(S3Connection(settings), "archive"))
        return made[-1]

    yield LeaseStores(new=new)
    for store in made:
        await store.close()


async def test_a_free_chain_is_taken_and_taking_it_again_is_a_no_op(stores: LeaseStores) -> None:
    leases = Leases(stores.new(), other(id="a"), RETRY)
    await leases.take_all(["t/0", "t/1"])
    await leases.take("t/0")
    assert leases.held == {"t/0", "t/1"}


async def test_a_live_holder_is_refused_with_its_facts(stores: LeaseStores) -> None:
    live = Leases(stores.new(), other(id="live", host="there"), RETRY)
    await live.take("t/0")
    newcomer = Leases(stores.new(), other(id="new", host="elsewhere"), RETRY)
    async with renewing(live):
        with pytest.raises(LeaseHeldError) as refused:
            await newcomer.take_all(["t/1", "t/0"])
    assert refused.value.holder == live.me and refused.value.chain == "t/0" and "t/" in refused.value.where
    assert refused.value.seen.renewed_s_ago is not None and refused.value.seen.renewed_s_ago < 5
    message = str(refused.value)
    assert "another writer" in message and "host there pid 200 since 2023-11-14T22:13:20Z" in message, message
    assert "--standby" in message


async def test_a_stopped_holder_is_taken_over(stores: LeaseStores) -> None:
    first = Leases(stores.new(), other(id="first"), RETRY)
    await first.take("t/0")
    await first.release()
    second = Leases(stores.new(), other(id="second", host="elsewhere"), RETRY)
    await second.take("t/0")
    third = Leases(stores.new(), other(id="third", host="yonder"), RETRY)
    async with renewing(second):
        with pytest.raises(LeaseHeldError) as refused:
            await third.take("t/0")
    assert refused.value.holder.id == "second"


async def test_a_silent_holder_is_taken_over_after_the_timeout(tmp_path: Path) -> None:
    """(On S3 the store stamps the heartbeat's time itself; the rule that reads it is test_liveness's.)"""
    silent = Leases(FilesystemLeases(tmp_path), other(id="silent"), RETRY)
    await silent.take("t/0")
    newcomer = Leases(FilesystemLeases(tmp_path), other(id="new", host="elsewhere"), RETRY)
    with pytest.raises(LeaseHeldError):
        await newcomer.take("t/0")
    stale = time.time() - sinks.leases.LEASE_TIMEOUT_S - 1
    os.utime(tmp_path / HOLDERS_DIRECTORY / "silent.json", (stale, stale))
    await newcomer.take("t/0")


async def test_of_two_takers_exactly_one_wins(stores: LeaseStores) -> None:
    contenders = [Leases(stores.new(), other(id=f"c{i}", host=f"host{i}"), RETRY) for i in range(2)]
    for contender in contenders:  # both live before either takes a chain
        await contender.take(f"warm-{contender.me.id}/0")
    outcomes: list[str] = []

    async def take(leases: Leases) -> None:
        try:
            await leases.take("t/0")
            outcomes.append("took")
        except LeaseHeldError:
            outcomes.append("refused")

    async with renewing(*contenders), anyio.create_task_group() as tasks:
        for contender in contenders:
            tasks.start_soon(take, contender)
    assert sorted(outcomes) == ["refused", "took"]


async def test_a_standby_takes_over_when_the_holder_stops(stores: LeaseStores, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sinks.leases, "STANDBY_POLL_S", 0.05)
    active = Leases(stores.new(), other(id="active"), RETRY)
    await active.take_all(["t/0", "t/1"])
    standby = Leases(stores.new(), other(id="standby", host="elsewhere"), RETRY)
    stop = anyio.Event()
    took: list[bool] = []

    async def stand_by() -> None:
        took.append(await standby.wait_for_all(["t/0", "t/1"], stop))

    async with renewing(active), anyio.create_task_group() as tasks:
        tasks.start_soon(stand_by)
        await anyio.sleep(0.3)
        assert took == [] and standby.held == frozenset()
        await active.release()
    assert took == [True] and standby.held == {"t/0", "t/1"}

    waiting = Leases(stores.new(), other(id="late", host="yonder"), RETRY)
    stop.set()  # a standby told to stop stops waiting
    assert await waiting.wait_for_all(["t/0"], stop) is False


def test_a_filesystem_lease_held_by_a_live_process_of_this_host_is_refused(tmp_path: Path) -> None:
    """The lock of a heartbeat proves its holder runs; once that process dies the chain is free at once."""
    holder = Holder.of_this_process()
    holder = Holder(id="child", host=holder.host, pid=0, since=holder.since)
    script = f"""
import anyio, sys
from pathlib import Path
from sinks.filesystem.leases import FilesystemLeases
from sinks.leases import Holder, Leases
from sinks.retry import RetryPolicy
async def main():
    me = Holder(id="child", host={holder.host!r}, pid=__import__("os").getpid(), since=0.0)
    leases = Leases(FilesystemLeases(Path({str(tmp_path)!r})), me, RetryPolicy(deadline_s=5))
    await leases.take("t/0")
    print("held", flush=True)
    sys.stdin.read()
anyio.run(main)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        me = Holder.of_this_process()

        async def take() -> None:
            await Leases(FilesystemLeases(tmp_path), me, RETRY).take("t/0")

        with pytest.raises(LeaseHeldError) as refused:
            anyio.run(take)
        assert refused.value.seen.locked is True and refused.value.holder.pid == child.pid
        child.kill()
        child.wait()
        anyio.run(take)  # its lock went with it, though its heartbeat is fresh
    finally:
        child.kill()
        child.wait()


async def test_a_silent_kafka_holder_is_taken_over_once_its_heartbeat_stood_still(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka keeps no time with an offset: a holder is live while its heartbeat moves; a standby that watched it
    stand still across looks counts from the first time it saw it there."""
    kafka_timing(monkeypatch)
    cluster = MemoryGroupOffsets()
    silent = Leases(KafkaLeases(cluster, "p", "b:9092"), other(id="silent"), RETRY)
    await silent.take_all(["t/0", "t/1"])
    assert cluster.groups["p.lease.silent"] == {("t", 0): (1, "silent")}  # its heartbeat, on its first chain
    assert {tp: Holder.decode(meta.encode()) for tp, (_, meta) in cluster.groups["p.lease"].items()} == {
        ("t", 0): silent.me,
        ("t", 1): silent.me,
    }
    store = KafkaLeases(cluster, "p", "b:9092")
    newcomer = Leases(store, other(id="new", host="elsewhere"), RETRY)
    async with renewing(silent):
        with pytest.raises(LeaseHeldError) as refused:
            await newcomer.take("t/1")
    assert refused.value.seen.renewed_s_ago == 0.0 and refused.value.where == "kafka://b:9092/t/1 (group p.lease)"
    began = time.monotonic()
    await newcomer.take("t/1")  # it renews no more, but never released: the whole timeout
    assert sinks.leases.LEASE_TIMEOUT_S < time.monotonic() - began < sinks.leases.LEASE_TIMEOUT_S + 0.3
    assert newcomer.held == {"t/1"}


async def test_a_kafka_holder_whose_chain_another_took_stops_at_its_next_renewal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An offset commit is not conditional: a rival whose commit came after the holder's read-back also holds
    the chain; the holder sees it at its next renewal and stops."""
    kafka_timing(monkeypatch)
    cluster = MemoryGroupOffsets()
    holder = Leases(KafkaLeases(cluster, "p", "b:9092"), other(id="holder"), RETRY)
    await holder.take_all(["t/0", "t/1"])
    rival = KafkaLeases(cluster, "p", "b:9092")
    rival_me = other(id="rival", host="elsewhere")
    await rival.beat(rival_me)
    await cluster.commit_group_offsets_with_metadata(
        "p.lease", {("t", 1): (0, sinks.kafka.leases.encode_lease(rival_me, ("t", 1)))}
    )
    with pytest.raises(LeaseLostError) as lost, anyio.fail_after(5):
        await holder.keep_renewed()
    assert lost.value.chain == "t/1" and lost.value.holder == rival_me
    assert "host elsewhere pid 200" in str(lost.value) and "--standby" in str(lost.value)


async def test_a_kafka_holder_that_stops_deletes_its_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka_timing(monkeypatch)
    cluster = MemoryGroupOffsets()
    holder = Leases(KafkaLeases(cluster, "p", "b:9092"), other(id="h"), RETRY)
    await holder.take("t/0")
    await holder.release()
    assert "p.lease.h" not in cluster.groups and "p.lease" in cluster.groups


async def test_a_kafka_chain_whose_topic_does_not_exist_yet_is_left_to_its_sink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody writes to a topic that does not exist (`create-topics` makes it later): its chain is not held, and
    the heartbeat goes on a partition the broker has."""
    kafka_timing(monkeypatch)
    cluster = MemoryGroupOffsets()
    cluster.missing_topics.add("later")
    holder = Leases(KafkaLeases(cluster, "p", "b:9092"), other(id="h"), RETRY)
    await holder.take_all(["later/0", "now/0"])
    assert holder.held == {"now/0"} and cluster.groups["p.lease.h"] == {("now", 0): (2, "h")}
    cluster.missing_topics.clear()
    await holder.take("later/0")
    assert holder.held == {"now/0", "later/0"}


async def test_a_kafka_holder_of_this_host_that_no_longer_runs_is_taken_over_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka_timing(monkeypatch)
    monkeypatch.setattr(sinks.leases, "LEASE_TIMEOUT_S", 30.0)  # so that only the pid can tell
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    cluster = MemoryGroupOffsets()
    dead = Leases(KafkaLeases(cluster, "p", "b:9092", host="here"), other(host="here", pid=int(ended.stdout)), RETRY)
    await dead.take("t/0")
    newcomer = Leases(KafkaLeases(cluster, "p", "b:9092", host="here"), other(id="new", host="here", pid=1), RETRY)
    with anyio.fail_after(5):
        await newcomer.take("t/0")
    assert newcomer.held == {"t/0"}


async def test_s3_sweeps_what_killed_processes_left(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first beat deletes the heartbeats not renewed for FORGET_AFTER_S (here: every one but its own),
    and none younger; a take of a chain deletes the older lease generations a killed taker left."""
    import boto3

    import sinks.s3.leases

    bucket = f"sweep-{abs(hash(tmp_path)) % 10**8}"
    client: Any = boto3.client(
        "s3", endpoint_url=moto_endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=bucket)
    settings = moto_settings(moto_endpoint, bucket)
    stores = [S3Leases(S3Connection(settings), "archive") for _ in range(4)]
    try:
        for index, killed in enumerate([other(id="k1"), other(id="k2")]):
            await stores[index].beat(killed)  # never stopped: killed
        heartbeats = f"archive/{sinks.s3.leases.HOLDERS_DIRECTORY}/"

        def listed(prefix: str) -> list[str]:
            return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))

        await stores[2].beat(other(id="young"))  # they are seconds old: kept
        assert listed(heartbeats) == [f"{heartbeats}{name}.json" for name in ("k1", "k2", "young")]
        monkeypatch.setattr(sinks.s3.leases, "FORGET_AFTER_S", -60.0)  # every heartbeat counts as old now
        await stores[3].beat(ME)
        assert listed(heartbeats) == [f"{heartbeats}me.json"]

        taker = Leases(stores[3], ME, RETRY)
        await taker.take("t/0")
        generations = "archive/t/_leases/0/"
        (first,) = listed(generations)
        # A killed taker created the next generation and did not delete the one before: taking again tidies up.
        client.put_object(Bucket=bucket, Key=f"{generations}0000000001", Body=ME.encode())
        await stores[3].take("t/0", ME, HolderSightings(stores[3].sight))
        assert listed(generations) == [f"{generations}0000000001"] and first == f"{generations}0000000000"
    finally:
        for store in stores:
            await store.close()
