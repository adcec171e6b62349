"""What a table adds next of one chain, listed from the archive: the chain's blobs after the table's position,
page by page (`sinks.tables.positions.next_blobs` chooses them). Shared by the run process's table keeper and
`table-sync`.

Cost: one listing page per LIST_PAGE names after the position (S3: one LIST request each); the walk stops at the
first gap, at `durable_end`, or after `limit` blobs.
"""

from __future__ import annotations

from sinks.destination import Archive
from sinks.tables.positions import NextBlobs, list_after, next_blobs

LIST_PAGE = 1000  # names per listing page


async def blobs_after(
    archive: Archive,
    destination_name: str,
    partition: int,
    position: int,
    durable_end: int | None = None,
    limit: int | None = None,
) -> NextBlobs:
    """The chain's consecutive blobs from `position`: up to `durable_end` (the offset its mirror made durable; None:
    every blob the chain holds) and at most `limit` of them (None: all)."""
    store = archive.chain_store(destination_name, partition)
    try:
        names: list[str] = []
        after = list_after(position)
        while True:
            page, more = await store.list_page(after, LIST_PAGE)
            names += page
            found = next_blobs(position, names, durable_end, limit)
            done = durable_end is not None and found.next_offset >= durable_end
            full = limit is not None and len(found.blobs) >= limit
            if not more or not page or found.gap_at is not None or done or full:
                return found
            after = page[-1]
    finally:
        await store.close()
