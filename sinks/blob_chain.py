"""The chain of immutable blobs that filesystem and S3 destinations share (SPEC §4).

A partition's directory (or key prefix) holds files named `<from>-<to>.parquet`, offsets zero-padded
to 20 digits so that name order is offset order. Sorted by `from`, each file starts right after the
previous one ends; the last `to + 1` is where the mirror continues. Anything else is a corrupt chain
and the mirror refuses to start, naming the files. The chain works over the small `BlobStore`
interface, so each store only has to list names and create a blob if it does not already exist.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Protocol

from sinks.base import DestinationError

BLOB_SUFFIX = ".parquet"
_OFFSET_DIGITS = 20
_BLOB_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
# Temporary files of an interrupted filesystem write: `.<final name>.tmp-<random>`.
TEMP_PREFIX = "."
TEMP_INFIX = ".tmp-"


class CorruptChainError(DestinationError):
    """The destination's files do not form a chain; `files` names the offending ones."""

    def __init__(self, reason: str, files: list[str]) -> None:
        self.reason = reason
        self.files = files
        super().__init__(f"corrupt chain: {reason}: {', '.join(files)}")


class BlobExistsError(DestinationError):
    """A blob with that name already exists: another writer owns this chain."""


@dataclass(frozen=True, order=True)
class BlobRange:
    first: int
    last: int

    @property
    def name(self) -> str:
        return blob_name(self.first, self.last)


def blob_name(first: int, last: int) -> str:
    if not 0 <= first <= last:
        raise ValueError(f"invalid blob range {first}-{last}")
    return f"{first:0{_OFFSET_DIGITS}d}-{last:0{_OFFSET_DIGITS}d}{BLOB_SUFFIX}"


def parse_blob_name(name: str) -> BlobRange | None:
    match = _BLOB_NAME.match(name)
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return BlobRange(first, last) if first <= last else None


def temp_name(final_name: str, token: str) -> str:
    return f"{TEMP_PREFIX}{final_name}{TEMP_INFIX}{token}"


def is_temp_name(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and TEMP_INFIX in name


class BlobStore(Protocol):
    """Where one partition's blobs live (a directory, an S3 prefix)."""

    def location(self, name: str) -> str:
        """Full, secret-free address of a blob, for messages."""
        ...

    async def list_names(self) -> list[str]:
        """Every entry name in the partition's directory, temporaries included."""
        ...

    async def put_if_absent(self, name: str, data: memoryview) -> int:
        """Durably create `name` with `data` unless it exists (then raise BlobExistsError).
        Returns the bytes stored."""
        ...

    async def remove(self, name: str) -> None: ...


def validate_chain(names: list[str], location: BlobStore) -> list[BlobRange]:
    """Check that non-temporary names form a chain; return it sorted. Raise CorruptChainError."""
    foreign = sorted(n for n in names if not is_temp_name(n) and parse_blob_name(n) is None)
    if foreign:
        raise CorruptChainError("unexpected entries (not <from>-<to>.parquet)", [location.location(n) for n in foreign])
    ranges = sorted(r for n in names if (r := parse_blob_name(n)) is not None)
    for previous, current in itertools.pairwise(ranges):
        if current.first <= previous.last:
            raise CorruptChainError(
                f"overlapping offsets {current.first}-{previous.last}",
                [location.location(previous.name), location.location(current.name)],
            )
        if current.first != previous.last + 1:
            raise CorruptChainError(
                f"missing offsets {previous.last + 1}-{current.first - 1}",
                [location.location(previous.name), location.location(current.name)],
            )
    return ranges


class BlobChain:
    """Appends to one partition's chain, enforcing the chain rule on every write."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._tail: BlobRange | None = None
        self._opened = False

    @property
    def store(self) -> BlobStore:
        return self._store

    @property
    def next_offset(self) -> int | None:
        return None if self._tail is None else self._tail.last + 1

    async def open(self) -> int | None:
        """Remove leftovers of interrupted writes, validate the chain, return the next offset."""
        names = await self._store.list_names()
        for name in names:
            if is_temp_name(name):
                await self._store.remove(name)
        ranges = validate_chain(names, self._store)
        self._tail = ranges[-1] if ranges else None
        self._opened = True
        return self.next_offset

    async def inspect(self) -> int | None:
        """Validate the chain and return the next offset without touching anything."""
        ranges = validate_chain(await self._store.list_names(), self._store)
        return ranges[-1].last + 1 if ranges else None

    async def append(self, first: int, last: int, data: memoryview) -> tuple[str, int]:
        """Store the blob for [first, last]; it must continue the chain. Returns (location, bytes)."""
        if not self._opened:
            raise RuntimeError("BlobChain.append before open")
        expected = self.next_offset
        if expected is not None and first != expected:
            raise DestinationError(f"chain continues at offset {expected}, refusing to write {first}-{last}")
        blob = BlobRange(first, last)
        size = await self._store.put_if_absent(blob.name, data)
        self._tail = blob
        return self._store.location(blob.name), size
