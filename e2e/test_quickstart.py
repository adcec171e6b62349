"""The README's first command, as a new user runs it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from e2e.destinations import FilesystemDestinationUnderTest
from e2e.harness import REPO, assert_same_records, read_archive


def test_quickstart_mirrors_sample_data_and_prints_status(tmp_path: Path) -> None:
    env = dict(os.environ, MIRROR_V3_QUICKSTART_DIR=str(tmp_path), MIRROR_V3_METRICS_PORT="0")
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "quickstart.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # status printed one row per mirror, each caught up (lag 0).
    rows = re.findall(r"^orders-(\d)\s+quickstart-orders\s+\d\s+0\s+50000\s+50000\s+0\s", result.stdout, re.M)
    assert sorted(rows) == ["0", "1", "2"], result.stdout
    assert (tmp_path / "quickstart.yaml").exists()
    for partition in range(3):
        archive = read_archive(FilesystemDestinationUnderTest(tmp_path / "mirror-data"), "quickstart-orders", partition)
        assert [r.offset for r in archive] == list(range(50_000))
        assert_same_records(archive, archive)  # no offset twice
    assert "Traceback" not in result.stderr
