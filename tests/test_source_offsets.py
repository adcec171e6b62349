"""Offset queries of many mirrors share requests; an error still reaches only the mirror it concerns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import pytest
from aiokafka import TopicPartition

from core.errors import MissingSourcePartitionError, SourceError
from source.offsets import OffsetWatch, SourceClientClosedError, SourceCluster


class CountingCluster(SourceCluster):
    """A SourceCluster whose ListOffsets requests are answered in memory and recorded."""

    def __init__(self, broken: set[TopicPartition] | None = None, hanging: set[TopicPartition] | None = None) -> None:
        super().__init__("127.0.0.1:1", request_timeout_ms=1000)
        self._started = True  # no broker: the requests below never reach the network
        self.requests: list[list[TopicPartition]] = []
        self.broken = broken or set()
        self.hanging = hanging or set()  # answered only after 60 s (aiokafka retrying a deleted topic's partition)
        self.produced: dict[TopicPartition, int] = {}  # records appended to a partition since the start
        self.kinds: list[tuple[str, ...]] = []  # the kinds each request asked

    async def _request_offsets(
        self, tps: list[TopicPartition], kinds: Sequence[str]
    ) -> dict[str, dict[TopicPartition, int]]:
        self.requests.append(tps)
        self.kinds.append(tuple(kinds))
        await asyncio.sleep(60 if self.hanging & set(tps) else 0.001)
        if self.broken & set(tps):
            raise SourceError(f"source {len(tps)} partitions: offset query failed: NotLeaderForPartitionError")
        base = {"start": 0, "stable": 100, "high": 200}
        return {
            kind: {tp: base[kind] + tp.partition + (self.produced.get(tp, 0) if kind != "start" else 0) for tp in tps}
            for kind in kinds
        }


Make = Callable[..., CountingCluster]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    made: list[CountingCluster] = []

    def factory(
        broken: set[TopicPartition] | None = None, hanging: set[TopicPartition] | None = None
    ) -> CountingCluster:
        made.append(CountingCluster(broken, hanging))
        return made[-1]

    yield factory
    for cluster in made:
        await cluster.close()


async def test_concurrent_queries_share_one_request(make: Make) -> None:
    cluster = make()
    answers = await asyncio.gather(*(cluster.offsets("t", p, "read_committed") for p in range(500)))
    assert len(cluster.requests) == 1
    assert sorted(tp.partition for tp in cluster.requests[0]) == list(range(500))
    assert [(a.log_start, a.end, a.high_watermark) for a in answers] == [(p, 100 + p, 200 + p) for p in range(500)]
    uncommitted = await cluster.offsets("t", 7, "read_uncommitted")
    assert uncommitted.end == 207
    assert len(cluster.requests) == 2


async def test_an_error_reaches_only_its_partition(make: Make) -> None:
    cluster = make(broken={TopicPartition("t", 3)})
    answers = await asyncio.gather(
        *(cluster.offsets("t", p, "read_committed") for p in range(5)), return_exceptions=True
    )
    assert isinstance(answers[3], SourceError)
    assert [a.end for i, a in enumerate(answers) if i != 3] == [100, 101, 102, 104]  # type: ignore[union-attr]
    # The shared request failed, then each partition was asked on its own.
    assert len(cluster.requests) == 1 + 5


async def test_a_waiter_that_gives_up_does_not_disturb_the_others(make: Make) -> None:
    cluster = make()
    impatient = asyncio.ensure_future(cluster.offsets("t", 1, "read_committed"))
    patient = asyncio.ensure_future(cluster.offsets("t", 2, "read_committed"))
    await asyncio.sleep(0)
    impatient.cancel()
    assert (await patient).end == 102
    with pytest.raises(asyncio.CancelledError):
        await impatient


async def test_close_fails_queries_under_way(make: Make) -> None:
    cluster = make()
    waiting = asyncio.ensure_future(cluster.offsets("t", 1, "read_committed"))
    await asyncio.sleep(0)
    await cluster.close()
    with pytest.raises(SourceClientClosedError) as caught:
        await waiting
    assert caught.value.cluster == cluster.name == cluster.bootstrap_servers


class FakeMetadata:
    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(1000)) if topic == "t" else set()


async def test_mirrors_starting_together_share_one_metadata_fetch(make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = make()
    fetches = 0

    async def fetch_all_metadata() -> FakeMetadata:
        nonlocal fetches
        fetches += 1
        await asyncio.sleep(0.01)
        return FakeMetadata()

    monkeypatch.setattr(cluster._committed._client, "fetch_all_metadata", fetch_all_metadata)
    await asyncio.gather(*(cluster.check_partition("t", p) for p in range(1000)))
    assert fetches == 1
    with pytest.raises(MissingSourcePartitionError) as missing:
        await cluster.check_partition("t", 1000)
    assert (missing.value.topic, missing.value.partition) == ("t", 1000) and 999 in (missing.value.partitions or ())
    with pytest.raises(MissingSourcePartitionError) as missing:
        await cluster.check_partition("u", 0)
    assert missing.value.topic == "u" and missing.value.partitions is None
    assert fetches == 1  # within a second the answer is reused


async def test_a_partition_that_hangs_holds_back_only_its_own_mirror(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("source.offsets.BATCH_PATIENCE_SECONDS", 0.05)
    cluster = make(hanging={TopicPartition("gone", 0)})
    # Whichever query leads the shared request (the first to ask), the hang stays with its own partition.
    for hanging_first in (True, False):
        first = cluster.offsets("gone", 0, "read_committed") if hanging_first else None
        gone = asyncio.ensure_future(first) if first is not None else None
        others = [asyncio.ensure_future(cluster.offsets("t", p, "read_committed")) for p in range(3)]
        gone = gone or asyncio.ensure_future(cluster.offsets("gone", 0, "read_committed"))
        done, _ = await asyncio.wait(others, timeout=5)
        assert len(done) == 3 and [o.result().end for o in others] == [100, 101, 102]
        assert not gone.done()
        gone.cancel()


class Watcher:
    """A mirror's side of the estate poll: how often it was woken."""

    def __init__(self, cluster: CountingCluster, partition: int, isolation: str = "read_committed") -> None:
        self.woken = 0
        self.watch = cluster.watch("t", partition, isolation, 0.05, self.wake)

    def wake(self) -> None:
        self.woken += 1


async def test_the_estate_poll_asks_every_partition_at_once_and_wakes_only_those_that_moved(make: Make) -> None:
    cluster = make()
    watchers = [Watcher(cluster, p) for p in range(200)]
    await cluster.poll_once()  # the first round: every watch learns its offsets
    assert len(cluster.requests) == 1 and len(cluster.requests[0]) == 200
    assert [w.woken for w in watchers] == [1] * 200
    for _ in range(2):  # nothing moved: nobody is woken
        await cluster.poll_once()
    assert len(cluster.requests) == 3 and [w.woken for w in watchers] == [1] * 200
    cluster.produced[TopicPartition("t", 7)] = 5
    await cluster.poll_once()
    assert [i for i, w in enumerate(watchers) if w.woken == 2] == [7]
    assert sum(w.woken for w in watchers) == 201
    # The first round asked all three kinds; the later ones only the end a read_committed mirror reads to.
    assert cluster.kinds[0] == ("start", "stable", "high") and set(cluster.kinds[1:]) == {("stable",)}
    polled = await cluster.polled(watchers[7].watch)
    # The high watermark is from the first (full) round: a read_committed mirror's rounds ask only the stable end.
    assert (polled.offsets.log_start, polled.offsets.end, polled.offsets.high_watermark) == (7, 112, 207)
    # One sighting per end shown: the first from the first poll to the last that still showed it, then the new one.
    (first, last, end), (moved_first, moved_last, moved_end) = polled.seen
    assert (end, moved_end) == (107, 112) and first < last < moved_first <= moved_last
    again = await cluster.polled(watchers[7].watch)
    assert again.seen == () and again.offsets == polled.offsets


async def test_a_partition_the_poll_cannot_answer_is_asked_alone_and_its_error_is_its_own(make: Make) -> None:
    cluster = make(broken={TopicPartition("t", 3)})
    watchers = [Watcher(cluster, p) for p in range(5)]
    await cluster.poll_once()
    assert [w.woken for w in watchers] == [1] * 5  # the shared request failed: every mirror is told to ask alone
    answers = await asyncio.gather(*(cluster.polled(w.watch) for w in watchers), return_exceptions=True)
    assert isinstance(answers[3], SourceError)
    assert [a.offsets.end for i, a in enumerate(answers) if i != 3] == [100, 101, 102, 104]  # type: ignore[union-attr]
    await cluster.poll_once()
    assert [w.woken for w in watchers] == [2] * 5  # every round without an answer: each asks alone again
    cluster.broken.clear()
    await cluster.poll_once()
    assert [w.woken for w in watchers] == [3] * 5  # answered again
    # A stable end newer than the last high watermark asked raises that watermark with it.
    cluster.produced[TopicPartition("t", 1)] = 150
    await cluster.poll_once()
    assert cluster.kinds[-1] == ("stable",)
    raised = await cluster.polled(watchers[1].watch)
    assert (raised.offsets.end, raised.offsets.high_watermark) == (251, 251)
    cluster.unwatch(watchers[0].watch)
    await cluster.poll_once()
    assert TopicPartition("t", 0) not in cluster.requests[-1]


def test_a_watch_wakes_its_mirror_only_for_what_it_waits_for_or_what_matters_at_any_end() -> None:
    woken: list[int] = []
    watch = OffsetWatch(TopicPartition("t", 0), "read_committed", 0.5, lambda: woken.append(1))
    seen = iter(range(1000))

    def poll(start: int, stable: int, high: int) -> int:
        before = len(woken)
        watch.answered(float(next(seen)), (start, stable, high))
        return len(woken) - before

    assert poll(0, 100, 100) == 1  # the first answer
    watch.wake_at_end = 150  # a flush is due at a known time; a full blob would be readable at 150
    assert [poll(0, end, end) for end in (110, 120, 149)] == [0, 0, 0]
    assert poll(0, 150, 150) == 1  # a full blob
    watch.wake_at_end = 300  # flushed; the next blob
    assert poll(5, 160, 160) == 1  # the log start moved: records may be lost
    assert poll(5, 160, 170) == 1  # a transaction holds the last stable offset
    assert poll(5, 160, 175) == 0  # ... still
    assert poll(5, 176, 176) == 1  # ... no longer
    assert poll(5, 176, 170) == 1  # the partition shrank below its old high watermark
    watch.wake_at_end = None
    assert poll(5, 177, 177) == 1  # every change
    # What the polls showed while the mirror slept still reaches it, one sighting per end.
    assert [end for _, _, end in watch.take().seen] == [100, 110, 120, 149, 150, 160, 176, 177]  # type: ignore[union-attr]


async def test_a_cluster_is_named_as_the_config_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`clusters.prod` is `prod` in its errors and its outage's log lines, and a missing topic names its address
    too; the bootstrap list alone names a source written out in a mirror."""
    refused = SourceCluster("127.0.0.1:1", request_timeout_ms=2000, name="prod")
    assert refused.reachability.name == "prod"
    with pytest.raises(SourceError) as unreachable:
        await refused.start()
    assert str(unreachable.value).startswith("source cluster prod unreachable: 127.0.0.1:1"), unreachable.value
    await refused.close()

    named = SourceCluster("127.0.0.1:1", request_timeout_ms=1000, name="prod")
    named._started = True  # the metadata below is answered in memory

    async def fetch_all_metadata() -> FakeMetadata:
        return FakeMetadata()

    monkeypatch.setattr(named._committed._client, "fetch_all_metadata", fetch_all_metadata)
    with pytest.raises(MissingSourcePartitionError) as missing:
        await named.check_partition("u", 0)
    assert str(missing.value) == "source topic 'u' does not exist on prod (127.0.0.1:1)"
    await named.close()
    assert SourceCluster("127.0.0.1:1", request_timeout_ms=1000).name == "127.0.0.1:1"
