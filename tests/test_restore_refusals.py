"""A preserve restore of an archive with holes is refused before anything is written, with the facts on the error
and one line that names the first hole and what to do (the end-to-end case runs in the soak run, and
test_disaster_recovery refuses one from S3 in every run)."""

from __future__ import annotations

import pytest

from commands.restore import ArchiveHolesError, RestorePartition, refuse_holes_for_preserve
from sinks.blob.chain import BlobRange
from sinks.filesystem.reading import FilesystemBlobReader
from workers.archive_records import ArchiveSurvey


def _part(survey: ArchiveSurvey) -> RestorePartition:
    reader = FilesystemBlobReader("/archive/orders/2")  # never read: the survey says what the range holds
    return RestorePartition("orders", 2, "orders-back", [BlobRange(0, 99)], 0, 100, reader, survey=survey)


def test_the_first_hole_refuses_preserve_naming_it_and_renumber() -> None:
    whole = _part(ArchiveSurvey(0, 100, 100, 0, None))
    holed = _part(ArchiveSurvey(0, 100, 97, 3, 41))
    refuse_holes_for_preserve([whole])
    with pytest.raises(ArchiveHolesError) as refused:
        refuse_holes_for_preserve([whole, holed])
    error = refused.value
    assert (error.chain, error.first, error.end, error.holes, error.first_hole) == ("orders/2", 0, 100, 3, 41)
    assert str(error) == (
        "orders/2: the archive holds no record at offset 41 (the first of 3 holes in 0-99: compaction, transaction "
        "markers or aborted records): offsets: preserve cannot give the records after it their offsets; use "
        "offsets: renumber"
    )
