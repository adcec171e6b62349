"""An archive's layout version (`sinks.archive.format`): an archive without the document is format 1 (everything
written before it existed), the first writer records it, and a reader that meets a newer format refuses in one line
with the facts on the error instead of misreading the archive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.prune import prune
from config.loader import parse_config
from sinks.archive.format import (
    FORMAT,
    FORMAT_DIRECTORY,
    FORMAT_NAME,
    NewerArchiveFormatError,
    UnreadableArchiveFormatError,
    check_format,
)
from sinks.filesystem.documents import FilesystemDocuments


async def test_an_archive_without_the_document_is_format_1_and_a_writer_records_it(tmp_path: Path) -> None:
    documents = FilesystemDocuments(tmp_path)
    assert await check_format(documents, str(tmp_path), writes=False) == 1
    assert not (tmp_path / FORMAT_DIRECTORY).exists(), "a reader writes nothing"
    assert await check_format(documents, str(tmp_path), writes=True) == FORMAT == 1
    recorded = json.loads((tmp_path / FORMAT_DIRECTORY / FORMAT_NAME).read_text())
    assert recorded["format"] == 1 and "written-by" in recorded
    assert await check_format(documents, str(tmp_path), writes=False) == 1


async def test_a_newer_format_is_refused_with_its_facts(tmp_path: Path) -> None:
    (tmp_path / FORMAT_DIRECTORY).mkdir()
    (tmp_path / FORMAT_DIRECTORY / FORMAT_NAME).write_text('{"format": 2, "written-by": "0.9.0", "more": true}')
    with pytest.raises(NewerArchiveFormatError) as refused:
        await check_format(FilesystemDocuments(tmp_path), "/archive", writes=True)
    error = refused.value
    assert (error.where, error.found, error.written_by, error.known) == ("/archive", 2, "0.9.0", 1)
    assert str(error) == (
        "the archive at /archive is in format 2 (written by mirror-v3 0.9.0); this release reads formats up to 1: "
        "upgrade mirror-v3 to read or write it"
    )


async def test_a_document_no_release_wrote_is_named(tmp_path: Path) -> None:
    (tmp_path / FORMAT_DIRECTORY).mkdir()
    (tmp_path / FORMAT_DIRECTORY / FORMAT_NAME).write_text("format one")
    with pytest.raises(UnreadableArchiveFormatError, match=r"_mirror-v3/format.json: not an archive format document"):
        await check_format(FilesystemDocuments(tmp_path), str(tmp_path), writes=False)


async def test_a_command_meeting_a_newer_archive_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    (root / FORMAT_DIRECTORY).mkdir(parents=True)
    (root / FORMAT_DIRECTORY / FORMAT_NAME).write_text('{"format": 7}')
    config = parse_config(
        f"clusters: {{src: {{bootstrap-servers: 'src:9092'}}}}\ndestination: {{type: filesystem, root: {root}}}\n"
        "mirrors:\n  - {name: o, cluster: src, topic: orders, partition: 0}\n",
        env={},
    )
    with pytest.raises(NewerArchiveFormatError, match=r"is in format 7; this release reads formats up to 1"):
        await prune(config, 1_000, False, lambda _: None, now_ms=2_000)
    assert sorted(p.name for p in root.iterdir()) == [FORMAT_DIRECTORY]
