"""Leases on an S3 destination (`sinks.leases`): heartbeats under `<prefix>/_mirror-v3/holders/`, numbered lease
objects beside each chain.

A heartbeat is the object `<holder id>.json`, rewritten by its process every renewal; its age is the store's own
clock's (the `Date` of the answer minus the object's `LastModified`), so no two machines' clocks are compared.
A chain's lease is the newest of `<prefix>/<name>/_leases/<partition>/<generation>`: taking it over creates the next
generation with `If-None-Match: *` (the same conditional create the blob claims rely on, `sinks.s3.store`), so of two
processes that found the same lease dead exactly one creates its successor; older generations are then deleted.
The lease objects sit beside the chain under a name Spark, Hive and Athena skip, like the claims.

What killed processes leave is swept: a process's first beat deletes the heartbeats not renewed for FORGET_AFTER_S
(by the store's clock: dead for every lease long before, and a process that was only paused writes its heartbeat
again at its next beat), and a take of a chain deletes the older lease generations a killed taker left.

Cost: a renewal is one PUT per process; taking a chain is one LIST, one GET, one PUT (and a DELETE of the previous
generation), plus one HEAD per holder per pass; the first beat one LIST per 1 000 heartbeats and a DELETE per dead
one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from sinks.leases import Holder, HolderSightings, LeaseHeldError, Sighting, Taken, is_live, take_each
from sinks.s3.errors import NoSuchKey, PreconditionFailed
from sinks.s3.store import ConnectionUser, S3Connection

HOLDERS_DIRECTORY = "_mirror-v3/holders"
LEASES_DIRECTORY = "_leases"
_GENERATION_DIGITS = 10
FORGET_AFTER_S = 3600.0  # a heartbeat not renewed for an hour is a killed process's: swept


def lease_prefix(root: str, chain: str) -> str:
    """`<root>/<name>/_leases/<partition>/`: under the topic's prefix, so removing a topic removes its leases."""
    name, _, partition = chain.rpartition("/")
    return f"{root}{name}/{LEASES_DIRECTORY}/{partition}/"


class S3Leases(ConnectionUser):
    def __init__(self, connection: S3Connection, prefix: str | None) -> None:
        super().__init__(connection)
        self._root = f"{prefix.strip('/')}/" if prefix else ""
        self._swept = False

    def location(self, chain: str) -> str:
        return f"s3://{self._bucket}/{lease_prefix(self._root, chain)}"

    def _heartbeat(self, holder: Holder) -> str:
        return f"{self._root}{HOLDERS_DIRECTORY}/{holder.id}.json"

    def _options(self) -> dict[str, str]:
        return self._connection.settings.short_lived_object_options()

    async def beat(self, me: Holder) -> None:
        s3, key = await self._s3(), self._heartbeat(me)
        await self._connection.call(
            f"renew lease s3://{self._bucket}/{key}",
            lambda: s3.put_object(Bucket=self._bucket, Key=key, Body=me.encode(), **self._options()),
        )
        if not self._swept:
            self._swept = True
            await self.sweep_dead(me)

    async def sweep_dead(self, me: Holder) -> list[str]:
        """Delete the heartbeats not renewed for FORGET_AFTER_S (never `me`'s); returns their keys. Best effort: a
        heartbeat left is read as a dead holder's all the same."""
        s3, prefix = await self._s3(), f"{self._root}{HOLDERS_DIRECTORY}/"
        swept: list[str] = []
        with contextlib.suppress(Exception):
            listing = s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix)
            async for page in self._connection.pages(f"list s3://{self._bucket}/{prefix}", listing):
                date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
                if not date:
                    continue  # no store clock to age them by
                now = parsedate_to_datetime(date).timestamp()
                for entry in page.get("Contents", []):
                    key = entry["Key"]
                    if key != self._heartbeat(me) and now - entry["LastModified"].timestamp() > FORGET_AFTER_S:
                        swept.append(key)
            for key in swept:
                await self._connection.call(
                    f"sweep a dead heartbeat s3://{self._bucket}/{key}",
                    lambda key=key: s3.delete_object(Bucket=self._bucket, Key=key),  # type: ignore[misc]
                )
        return swept

    async def stop_beating(self, me: Holder) -> None:
        s3, key = await self._s3(), self._heartbeat(me)
        await self._connection.call(
            f"release lease s3://{self._bucket}/{key}", lambda: s3.delete_object(Bucket=self._bucket, Key=key)
        )

    async def sight(self, holder: Holder) -> Sighting:
        s3, key = await self._s3(), self._heartbeat(holder)
        try:
            head = await self._connection.call(
                f"look at lease s3://{self._bucket}/{key}", lambda: s3.head_object(Bucket=self._bucket, Key=key)
            )
        except NoSuchKey:
            return Sighting(holder, renewed_s_ago=None)
        renewed = head["LastModified"].timestamp()
        date = head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        now = parsedate_to_datetime(date).timestamp() if date else renewed
        return Sighting(holder, renewed_s_ago=max(0.0, now - renewed))

    async def take_many(self, chains: Sequence[str], me: Holder, seen: HolderSightings) -> Taken:
        return await take_each(self.take, chains, me, seen)

    async def take(self, chain: str, me: Holder, seen: HolderSightings) -> None:
        s3, prefix = await self._s3(), lease_prefix(self._root, chain)
        while True:
            generations = await self._generations(s3, prefix)
            newest = generations[-1] if generations else -1
            holder = None if newest < 0 else await self._read(s3, prefix + _generation_name(newest))
            if holder is not None and holder.id == me.id:
                await self._delete_generations(s3, prefix, generations[:-1])  # what a killed taker left
                return
            if holder is not None:
                sighting = await seen.of(holder)
                if is_live(sighting, me):
                    raise LeaseHeldError(chain, self.location(chain), sighting)
            key = prefix + _generation_name(newest + 1)
            try:
                await self._connection.call(
                    f"take lease s3://{self._bucket}/{key}",
                    lambda key=key: s3.put_object(  # type: ignore[misc]
                        Bucket=self._bucket,
                        Key=key,
                        Body=me.encode(),
                        IfNoneMatch="*",
                        **self._options(),
                    ),
                )
            except PreconditionFailed:
                continue  # another process took it first (or our own answer was lost): look again
            await self._delete_generations(s3, prefix, generations)
            return

    async def _delete_generations(self, s3: Any, prefix: str, generations: list[int]) -> None:
        """History now (best effort: a leftover is only ever an older generation, deleted at the next take)."""
        for old in generations:
            with contextlib.suppress(Exception):
                await self._connection.call(
                    "delete an old lease",
                    lambda old=old: s3.delete_object(  # type: ignore[misc]
                        Bucket=self._bucket, Key=prefix + _generation_name(old)
                    ),
                )

    async def _generations(self, s3: Any, prefix: str) -> list[int]:
        response = await self._connection.call(
            f"list s3://{self._bucket}/{prefix}",
            lambda: s3.list_objects_v2(Bucket=self._bucket, Prefix=prefix, MaxKeys=1000),
        )
        names = [entry["Key"][len(prefix) :] for entry in response.get("Contents", [])]
        return sorted(int(name) for name in names if name.isdigit())

    async def _read(self, s3: Any, key: str) -> Holder | None:
        async def read() -> bytes:
            response = await s3.get_object(Bucket=self._bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        try:
            return Holder.decode(await self._connection.call(f"read lease s3://{self._bucket}/{key}", read))
        except NoSuchKey:
            return None  # deleted by its successor's taker meanwhile: the next look finds the successor


def _generation_name(generation: int) -> str:
    return f"{generation:0{_GENERATION_DIGITS}d}"
