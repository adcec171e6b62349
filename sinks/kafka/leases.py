"""Leases on a Kafka destination (`sinks.leases`): committed offsets of two consumer groups on the destination
cluster, each with a metadata string, so no topic of its own is needed and nothing is produced.

- A chain's lease (`<destination topic>/<partition>`) is the offset committed for that partition by group
  `<transaction-id-prefix>.lease`; its metadata names the holder and the partition it beats on.
- A holder's heartbeat is the offset committed by group `<transaction-id-prefix>.lease.<holder id>` on one
  partition (its first chain's), raised by one every renewal; stopping deletes the group.

Kafka keeps no time with a committed offset that a client can read, so a holder is live when its heartbeat is seen
to move: a look watches it for up to LEASE_TIMEOUT_S (a live holder moves it within RENEW_EVERY_S), and remembers
where it saw it, so a standby that looks again knows how long it has stood still. No two machines' clocks are
compared.

An offset commit is not conditional, so taking is write-then-read-back: the free chains are committed in one
request, and read back SETTLE_S later; a chain that names another taker by then is left to it (the last commit
wins, and both read it back after both wrote). To cover a read-back that came before a slower rival's commit, a
holder reads its chains' leases at every renewal and stops with `LeaseLostError` when one names another process.

The lease is what keeps a second writer out of a Kafka destination: in renumber mode a transaction of an older
producer is fenced by the newer one as well, but in preserve mode nothing else stops two writers appending the same
range, since a record's offset there is its source offset and no transaction can wrap it.

Cost: a renewal is one commit and one fetch per process (of every chain it holds, one request each); taking a batch
of chains is a fetch, a commit and a fetch, plus one watched heartbeat per holder found; an operator sees the two
groups in `kafka-consumer-groups --list`, their "lag" meaningless.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anyio

import sinks.leases as lease_timing
from kafka_clients.admin import AdminRequestError
from sinks.leases import (
    Holder,
    HolderSightings,
    LeaseHeldError,
    LeaseLostError,
    Sighting,
    Taken,
    gone_from_this_host,
    is_live,
)
from sinks.retry import TransientDestinationError

SETTLE_S = 1.0  # commit to read-back: longer than a commit's round trip, so a rival's commit is seen
WATCH_EVERY_S = 0.5  # how often a look at a heartbeat reads it again

TopicPartition = tuple[str, int]
T = TypeVar("T")


class GroupOffsets(Protocol):
    """What the store needs of the destination cluster (`kafka_clients.admin.ClusterAdmin`)."""

    async def group_offsets_with_metadata(
        self, group: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[int, str]]: ...

    async def commit_group_offsets_with_metadata(
        self, group: str, offsets: dict[TopicPartition, tuple[int, str]]
    ) -> dict[TopicPartition, str]: ...

    async def delete_group(self, group: str) -> None: ...


def partition_of(chain: str) -> TopicPartition:
    topic, _, partition = chain.rpartition("/")
    return topic, int(partition)


def chain_of(tp: TopicPartition) -> str:
    return f"{tp[0]}/{tp[1]}"


def encode_lease(holder: Holder, beat: TopicPartition) -> str:
    return json.dumps({**json.loads(holder.encode()), "beat": [beat[0], beat[1]]})


def decode_lease(metadata: str) -> tuple[Holder, TopicPartition] | None:
    """None for anything that is not a lease (an offset committed by hand)."""
    holder = Holder.decode(metadata.encode())
    try:
        topic, partition = json.loads(metadata)["beat"]
        return (holder, (str(topic), int(partition))) if holder is not None else None
    except (ValueError, KeyError, TypeError):
        return None


class KafkaLeases:
    def __init__(
        self,
        admin: GroupOffsets,
        prefix: str,
        where: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        host: str | None = None,
    ) -> None:
        self._admin = admin
        self._where = where  # the destination's bootstrap servers, for messages
        self._clock, self._sleep = clock, sleep
        self._host = host or socket.gethostname()
        self.lease_group = f"{prefix}.lease"
        self._beat_on: TopicPartition | None = None  # chosen with the first chain taken
        self._beats = 0
        self._held: set[TopicPartition] = set()
        self._beat_of: dict[str, TopicPartition] = {}  # where each holder seen in a lease beats
        self._still: dict[str, tuple[int, float]] = {}  # holder id -> (heartbeat offset, first seen at it)

    def location(self, chain: str) -> str:
        return f"kafka://{self._where}/{chain} (group {self.lease_group})"

    async def _ask(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """An admin request; a refused or unanswered one is the retry layer's to judge (the broker did it at most
        once, and each request here can be repeated: a commit of the same lease, a read)."""
        try:
            return await call(*args)
        except AdminRequestError as exc:
            raise TransientDestinationError(f"lease on kafka://{self._where}: {exc}") from None

    def _heartbeat_group(self, holder: Holder) -> str:
        return f"{self.lease_group}.{holder.id}"

    async def beat(self, me: Holder) -> None:
        """Raise the heartbeat (nothing to raise before the first chain is taken: no lease names this process yet),
        then check that every held lease still names this process."""
        if self._beat_on is None:
            return
        await self._raise_heartbeat(me)
        if not self._held:
            return
        found = await self._ask(self._admin.group_offsets_with_metadata, self.lease_group, sorted(self._held))
        for tp in sorted(self._held):
            lease = decode_lease(found[tp][1]) if tp in found else None
            if lease is not None and lease[0].id != me.id:
                raise LeaseLostError(chain_of(tp), self.location(chain_of(tp)), lease[0])

    async def _raise_heartbeat(self, me: Holder) -> None:
        assert self._beat_on is not None
        self._beats += 1
        group = self._heartbeat_group(me)
        refused = await self._ask(
            self._admin.commit_group_offsets_with_metadata, group, {self._beat_on: (self._beats, me.id)}
        )
        if refused:  # its topic was deleted: the holder no longer looks live, say so (the renewal WARN)
            raise TransientDestinationError(
                f"{self.location(chain_of(self._beat_on))}: the broker refused the heartbeat: {refused[self._beat_on]}"
            )

    async def stop_beating(self, me: Holder) -> None:
        if self._beat_on is not None:
            await self._ask(self._admin.delete_group, self._heartbeat_group(me))
            self._beat_on = None
        self._held.clear()

    async def sight(self, holder: Holder) -> Sighting:
        """Watch the holder's heartbeat until it moves (live), or until it has stood still for LEASE_TIMEOUT_S
        since this store first saw it at that offset (dead)."""
        if gone_from_this_host(holder, self._host):
            # Dead at once, as on every store: its Spark JVM exits when its stdin (a pipe from the dead process)
            # closes and takes its Python workers with it, within seconds, while a newcomer still starts its own
            # session before it produces anything.
            return Sighting(holder, renewed_s_ago=None)
        beat_on = self._beat_of.get(holder.id)
        if beat_on is None:
            return Sighting(holder, renewed_s_ago=None)
        group = self._heartbeat_group(holder)
        while True:
            found = (await self._ask(self._admin.group_offsets_with_metadata, group, [beat_on])).get(beat_on)
            if found is None or found[1] != holder.id:
                self._still.pop(holder.id, None)
                return Sighting(holder, renewed_s_ago=None)  # it stopped (its heartbeat group is gone)
            now = self._clock()
            offset, since = self._still.get(holder.id, (found[0], now))
            if offset != found[0]:
                self._still[holder.id] = (found[0], now)
                return Sighting(holder, renewed_s_ago=0.0)
            self._still[holder.id] = (offset, since)
            if now - since > lease_timing.LEASE_TIMEOUT_S:
                return Sighting(holder, renewed_s_ago=now - since)
            await self._sleep(WATCH_EVERY_S)

    async def take_many(self, chains: Sequence[str], me: Holder, seen: HolderSightings) -> Taken:
        wanted = [partition_of(chain) for chain in chains]
        if not wanted:
            return Taken(())
        if self._beat_on is None and not await self._start_beating(me, wanted):
            return Taken(())  # none of their topics exists yet
        assert self._beat_on is not None
        while True:
            leases = await self._leases(wanted)
            held_by_other = await self._refusal(wanted, leases, me, seen)
            if held_by_other is not None:
                return Taken(tuple(chain_of(tp) for tp in wanted if tp in self._held), held_by_other)
            free = {tp: (0, encode_lease(me, self._beat_on)) for tp in wanted if not _names(leases.get(tp), me)}
            if not free:
                self._held.update(wanted)
                return Taken(tuple(chain_of(tp) for tp in wanted))
            refused = await self._ask(self._admin.commit_group_offsets_with_metadata, self.lease_group, free)
            self._check_refusals(refused)
            wanted = [tp for tp in wanted if tp not in refused]
            await self._sleep(SETTLE_S)
            leases = await self._leases(wanted)
            mine = [tp for tp in wanted if _names(leases.get(tp), me)]
            self._held.update(mine)
            if len(mine) == len(wanted):
                return Taken(tuple(chain_of(tp) for tp in wanted))
            # A rival committed after us: the next round looks at it (it beats, so it is refused as live).

    async def _start_beating(self, me: Holder, wanted: list[TopicPartition]) -> bool:
        """Beat on the first of `wanted` whose topic exists (before any lease names this process, so it is seen
        live); False when none does."""
        for tp in wanted:
            self._beats += 1
            group = self._heartbeat_group(me)
            refused = await self._ask(self._admin.commit_group_offsets_with_metadata, group, {tp: (self._beats, me.id)})
            self._check_refusals(refused)
            if not refused:
                self._beat_on = tp
                return True
        return False

    def _check_refusals(self, refused: dict[TopicPartition, str]) -> None:
        """Raises for a refusal other than a missing topic (the retry layer judges it). A topic that does not exist
        yet has nobody writing to it: its sink takes the lease at open, once the topic is made (`create-topics`) or
        after it has said that the topic is missing."""
        for tp, error in sorted(refused.items()):
            if error != "UNKNOWN_TOPIC_OR_PART":
                raise TransientDestinationError(f"{self.location(chain_of(tp))}: the broker refused the lease: {error}")

    async def _leases(self, wanted: list[TopicPartition]) -> dict[TopicPartition, tuple[Holder, TopicPartition]]:
        found = await self._ask(self._admin.group_offsets_with_metadata, self.lease_group, wanted)
        leases = {tp: lease for tp, (_, metadata) in found.items() if (lease := decode_lease(metadata)) is not None}
        for holder, beat_on in leases.values():
            self._beat_of[holder.id] = beat_on
        return leases

    async def _refusal(
        self,
        wanted: list[TopicPartition],
        leases: dict[TopicPartition, tuple[Holder, TopicPartition]],
        me: Holder,
        seen: HolderSightings,
    ) -> LeaseHeldError | None:
        """The first wanted chain a live holder keeps; every holder is watched at the same time (a dead one takes
        LEASE_TIMEOUT_S to tell), each once."""
        holders = {lease[0].id: lease[0] for lease in leases.values() if lease[0].id != me.id}
        sightings: dict[str, Sighting] = {}
        failed: list[Exception] = []

        async def look(holder: Holder) -> None:
            try:
                sightings[holder.id] = await seen.of(holder)
            except Exception as exc:  # raised as itself below, not inside a group (the retry layer judges it)
                failed.append(exc)

        async with anyio.create_task_group() as looks:
            for holder in holders.values():
                looks.start_soon(look, holder)
        if failed:
            raise failed[0]
        for tp in wanted:
            lease = leases.get(tp)
            if lease is not None and lease[0].id != me.id and is_live(sightings[lease[0].id], me):
                return LeaseHeldError(chain_of(tp), self.location(chain_of(tp)), sightings[lease[0].id])
        return None

    async def close(self) -> None:
        return None


def _names(lease: tuple[Holder, TopicPartition] | None, me: Holder) -> bool:
    return lease is not None and lease[0].id == me.id
