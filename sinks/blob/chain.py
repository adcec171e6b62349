"""The chain of immutable blobs that filesystem and S3 destinations share (SPEC §4).

A partition's directory (or key prefix) holds files named `<from>-<to>.parquet`, offsets zero-padded
to 20 digits so that name order is offset order. Sorted by `from`, each file starts right after the
previous one ends; the last `to + 1` is where the mirror continues. Anything else is a corrupt chain
and the mirror refuses to start, naming the files. The chain works over the small `BlobStore`
interface, so each store only has to list names and create a blob if it does not already exist.

One more rule lets a chain be compacted while anyone reads it: a blob whose range lies inside another blob's range
is redundant, and the chain is made of the blobs no other contains. A compaction commits the merged blob (the
records of a run of adjacent blobs, under a name covering the run) before it deletes the run, so every reader sees
the same records at every moment, and after a crash between the two the run is simply redundant until someone
removes it. Only containment is forgiven: blobs that overlap without one containing the other stay corrupt.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sinks.base import DestinationError
from sinks.blob.staging import StagedBlob

BLOB_SUFFIX = ".parquet"
_OFFSET_DIGITS = 20
_BLOB_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
# Temporary files of an interrupted filesystem write: `.<final name>.tmp-<random>`.
TEMP_PREFIX = "."
TEMP_INFIX = ".tmp-"


@dataclass(frozen=True, order=True)
class BlobRange:
    first: int
    last: int

    @property
    def name(self) -> str:
        return blob_name(self.first, self.last)


class ChainProblem(enum.Enum):
    """Why a destination's files are not a chain; the value is how the operator reads it."""

    FOREIGN_ENTRIES = "unexpected entries (not <from>-<to>.parquet)"
    OVERLAP = "overlapping offsets"
    GAP = "missing offsets"
    CLAIM_OFF_CHAIN = "the claimed next blob does not continue the chain"
    STALE_CLAIM = (
        "a claim beyond the chain's end (blobs were removed without their claims? remove both to start this chain "
        "afresh)"
    )
    OTHER_WRITER = "another writer is appending to this chain"


class CorruptChainError(DestinationError):
    """The destination's files do not form a chain: `problem`, the `offsets` it concerns (the overlap, the gap,
    the claimed blob) where there are any, and the offending `files`."""

    def __init__(self, problem: ChainProblem, files: list[str], offsets: BlobRange | None = None) -> None:
        self.problem, self.files, self.offsets = problem, files, offsets
        self.reason = problem.value if offsets is None else f"{problem.value} {offsets.first}-{offsets.last}"
        super().__init__(f"corrupt chain: {self.reason}: {', '.join(files)}")


class BlobExistsError(DestinationError):
    """A blob with that name already exists: another writer owns this chain."""


class OutOfChainWriteError(DestinationError):
    """A blob that does not continue the chain: it must start at `expected_first`, and be exactly `claimed`
    when an interrupted commit claimed the next blob. A caller's bug or a second writer; nothing is written."""

    def __init__(self, location: str, blob: BlobRange, expected_first: int, claimed: BlobRange | None = None) -> None:
        self.location, self.blob, self.expected_first, self.claimed = location, blob, expected_first, claimed
        refusal = f"refusing to write {blob.first}-{blob.last}"
        if claimed is None:
            super().__init__(f"{location}: chain continues at offset {expected_first}, {refusal}")
        else:
            super().__init__(
                f"{location}: an interrupted commit claimed {claimed.first}-{claimed.last} as the next blob, {refusal}"
            )


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


@dataclass(frozen=True)
class ListedBlob:
    """A name as a listing with details gives it: its size and its time (Unix seconds: a merged blob's is its newest
    original's on a filesystem; on S3 the listing's object time, which for a merged blob is when it was merged)."""

    name: str
    size: int
    modified_s: float


class ChainListing(Protocol):
    """What reading a chain's names takes (`find_tail`, `verify_all`)."""

    def location(self, name: str) -> str:
        """Full, secret-free address of a blob, for messages."""
        ...

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        """Up to `max_keys` entry names sorting after `start_after` (all when None), in name order,
        temporaries excluded; and whether more follow."""
        ...


class BlobStore(ChainListing, Protocol):
    """Where one partition's blobs live (a directory, an S3 prefix)."""

    @property
    def checks_for_foreign_blobs(self) -> bool:
        """Whether to list behind the tail after every append to catch a second writer. Needed where a store
        ignores conditional creates (some S3-compatible stores; known once the chain is open); skipped where creates
        are no-clobber (a directory: link(2))."""
        ...

    async def list_details(self, start_after: str | None, max_keys: int) -> tuple[list[ListedBlob], bool]:
        """`list_page` with each entry's size and time (one listing: S3 gives them with the names)."""
        ...

    async def modified_at(self, name: str) -> float | None:
        """Unix time the blob was written, None if the store cannot tell or the blob is gone."""
        ...

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        """Durably publish a staged blob as `name` unless the name exists (then raise BlobExistsError;
        finding this very blob there after a failed attempt counts as published). Returns its bytes.

        `after` is the blob the chain ended with as this writer knows it (None: empty). A store that can
        refuses the commit (BlobExistsError) when the chain ends elsewhere: a second writer whose blobs
        are cut at other offsets never shares a name with the first, so only this check fences it."""
        ...

    async def commit_merged(self, name: str, staged: StagedBlob) -> bool:
        """Publish a merged blob (`sinks.blob.merging`) as `name` unless the name exists: True when this call
        published it (or an earlier attempt of this process did), False when it was there already (another
        compaction of the same run finished first: the same records), and the staged bytes are discarded. Nothing
        about the chain's end: a merged blob never is its last blob."""
        ...

    async def remove(self, name: str) -> None:
        """Delete a blob (one a merged blob made redundant); gone already is done."""
        ...

    async def remove_redundant(self, names: Sequence[str]) -> None:
        """Delete blobs a merged blob made redundant, in any order (each is redundant alone); gone already is done.
        In batches: one thread hop (a directory), one DeleteObjects per 1 000 (S3)."""
        ...

    async def discard_staged(self, staged: StagedBlob) -> None:
        """Remove a staged blob that will not be committed (best effort)."""
        ...

    async def forget_before(self, first_kept: int) -> int:
        """Remove what the store keeps about the blobs before offset `first_kept` besides the blobs themselves
        (a prune's: S3's claims), returning how many things it removed."""
        ...

    async def interrupted_commit(self, after: str | None) -> str | None:
        """The blob a writer claimed as the successor of `after` (None: the first blob of an empty chain)
        and may not have published yet, on a store whose commit is a claim followed by a publish; None when
        nothing is claimed there or the store's commit is a single atomic step. The next blob must be
        exactly that one, whoever writes it. Raises CorruptChainError for claims no chain end explains."""
        ...

    async def clean_leftovers(self) -> list[str]:
        """Remove what interrupted writes left behind (temporary files, unfinished uploads)."""
        ...

    async def close(self) -> None: ...


PAGE = 1000


async def list_all(store: ChainListing) -> list[str]:
    names: list[str] = []
    start_after: str | None = None
    while True:
        page, truncated = await store.list_page(start_after, PAGE)
        names.extend(page)
        if not truncated or not page:
            return names
        start_after = page[-1]


def _probe_key(offset: int) -> str:
    """Sorts after every blob starting below `offset` and before every blob starting at or above it."""
    return f"{offset - 1:0{_OFFSET_DIGITS}d}-{'9' * _OFFSET_DIGITS}" if offset > 0 else ""


def without_redundant(ranges: Iterable[BlobRange]) -> tuple[list[BlobRange], list[BlobRange]]:
    """The blobs no other blob contains, in chain order, and the redundant ones (each inside one of those). One
    sort, then one pass: O(n log n) for n blobs."""
    kept: list[BlobRange] = []
    redundant: list[BlobRange] = []
    for blob in sorted(ranges, key=lambda r: (r.first, -r.last)):  # a container before what it contains
        if kept and blob.last <= kept[-1].last:  # and blob.first >= kept[-1].first: the sort's order
            redundant.append(blob)
        else:
            kept.append(blob)
    return kept, redundant


def redundant_by_container(
    kept: Sequence[BlobRange], redundant: Iterable[BlobRange]
) -> dict[BlobRange, list[BlobRange]]:
    """`without_redundant`'s two lists joined: each redundant blob under the kept blob that contains it, in chain
    order. One sort and one pass."""
    inside: dict[BlobRange, list[BlobRange]] = {}
    position = 0
    for blob in sorted(redundant):  # each inside exactly one kept blob; both sorted by offset
        while position < len(kept) and kept[position].last < blob.first:
            position += 1
        inside.setdefault(kept[position], []).append(blob)
    return inside


def validate_chain(names: list[str], location: ChainListing) -> list[BlobRange]:
    """Check that non-temporary names form a chain; return it sorted, without its redundant blobs. Raise
    CorruptChainError."""
    foreign = sorted(n for n in names if not is_temp_name(n) and parse_blob_name(n) is None)
    if foreign:
        raise CorruptChainError(ChainProblem.FOREIGN_ENTRIES, [location.location(n) for n in foreign])
    ranges, _ = without_redundant(r for n in names if (r := parse_blob_name(n)) is not None)
    for previous, current in itertools.pairwise(ranges):
        if current.first <= previous.last:
            raise CorruptChainError(
                ChainProblem.OVERLAP,
                [location.location(previous.name), location.location(current.name)],
                BlobRange(current.first, previous.last),
            )
        if current.first != previous.last + 1:
            raise CorruptChainError(
                ChainProblem.GAP,
                [location.location(previous.name), location.location(current.name)],
                BlobRange(previous.last + 1, current.first - 1),
            )
    return ranges


async def find_tail(store: ChainListing) -> list[BlobRange]:
    """The chain's head page and tail page, validated, found with a bounded number of listings.

    Names sort by offset, so a listing that starts after a probe offset tells whether blobs exist
    beyond it. From the first page's density the search gallops forward, then bisects, until one
    page holds the end of the chain. The cost grows with log(number of blobs), not with it, and no
    blob is read. Blobs between the two pages are not checked here (see `verify_all`).
    """
    head, truncated = await store.list_page(None, PAGE)
    checked = validate_chain(head, store)
    if not truncated or not checked:
        return checked
    low = checked[-1].last + 1  # blobs are known to exist at or beyond `low`
    span = max(1, checked[-1].last + 1 - checked[0].first)
    step, high = span, None
    while True:
        probe = low + step if high is None else (low + high) // 2
        if high is not None and high - low <= 1:
            probe = low  # bracket closed: the page from `low` must hold the tail
        page, more = await store.list_page(_probe_key(probe), PAGE)
        if page and not more:
            tail = validate_chain(page, store)
            if tail[0].first > checked[-1].last + 1 and probe <= checked[-1].last + 1:
                raise CorruptChainError(
                    ChainProblem.GAP,
                    [store.location(checked[-1].name), store.location(tail[0].name)],
                    BlobRange(checked[-1].last + 1, tail[0].first - 1),
                )
            return tail
        if not page:
            high = probe
        else:
            low = probe
            if high is None:
                step *= 2


async def verify_all(store: ChainListing) -> list[BlobRange]:
    """Validate every blob name of the chain (a full listing)."""
    return validate_chain(await list_all(store), store)


class BlobChain:
    """Appends to one partition's chain, enforcing the chain rule on every write."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._tail: BlobRange | None = None
        self._claimed: BlobRange | None = None
        self._opened = False

    @property
    def store(self) -> BlobStore:
        return self._store

    @property
    def next_offset(self) -> int | None:
        if self._tail is None:
            # A claimed first blob is where the chain starts, as if it were published already.
            return None if self._claimed is None else self._claimed.first
        return self._tail.last + 1

    @property
    def claimed(self) -> BlobRange | None:
        """The blob an interrupted writer claimed as the next one (see `BlobStore.interrupted_commit`):
        the next append must be exactly this range."""
        return self._claimed

    async def open(self) -> int | None:
        """Remove leftovers of interrupted writes, validate the chain's tail, return the next offset."""
        await self._store.clean_leftovers()
        ranges = await find_tail(self._store)
        self._tail = ranges[-1] if ranges else None
        self._claimed = await self._find_claim()
        self._opened = True
        return self.next_offset

    async def _find_claim(self) -> BlobRange | None:
        tail = None if self._tail is None else self._tail.name
        claimed = await self._store.interrupted_commit(tail)
        if claimed is None:
            return None
        blob = parse_blob_name(claimed)
        continues = blob is not None and (self._tail is None or blob.first == self._tail.last + 1)
        if blob is None or not continues:
            files = [self._store.location(n) for n in (tail, claimed) if n is not None]
            raise CorruptChainError(ChainProblem.CLAIM_OFF_CHAIN, files, blob)
        return blob

    async def inspect(self, deep: bool = False) -> int | None:
        """Validate the chain (its tail, or all of it) and return the next offset; changes nothing."""
        tail = await self.inspect_tail(deep)
        return None if tail is None else tail.last + 1

    async def inspect_tail(self, deep: bool = False) -> BlobRange | None:
        """Validate the chain (its tail, or all of it) and return its last blob; changes nothing."""
        ranges = await (verify_all(self._store) if deep else find_tail(self._store))
        return ranges[-1] if ranges else None

    async def append(self, staged: StagedBlob) -> tuple[str, int]:
        """Commit the staged blob; it must continue the chain. Returns (location, bytes).

        Afterwards the listing right behind the previous tail must show exactly the new blob: on
        stores that ignore conditional creates, that is where a second writer shows up, within one
        flush of appearing.
        """
        assert self._opened, "BlobChain.append before open"  # a caller's bug, never the operator's
        expected = self.next_offset
        blob = BlobRange(staged.first, staged.last)
        if expected is not None and staged.first != expected:
            raise OutOfChainWriteError(self._store.location(""), blob, expected)
        if self._claimed is not None and blob != self._claimed:
            raise OutOfChainWriteError(self._store.location(""), blob, self._claimed.first, self._claimed)
        previous = self._tail
        size = await self._store.commit_staged(blob.name, staged, None if previous is None else previous.name)
        self._tail, self._claimed = blob, None
        if self._store.checks_for_foreign_blobs:
            await self._check_no_foreign_blobs(previous, blob)
        return self._store.location(blob.name), size

    async def _check_no_foreign_blobs(self, previous: BlobRange | None, written: BlobRange) -> None:
        page, _ = await self._store.list_page(previous.name if previous else None, 2)
        if page[:1] == [written.name] and len(page) == 1:
            return
        others = [name for name in page if name != written.name]
        raise CorruptChainError(
            ChainProblem.OTHER_WRITER,
            [self._store.location(written.name), *(self._store.location(n) for n in others)],
        )
