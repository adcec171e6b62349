"""The README's first command, as a new user runs it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from testkit.mirror_run import REPO
from testkit.ports import free_port
from testkit.quickstart import LIVE_RECORDS_PER_PARTITION, RECORDS_PER_PARTITION, TOPIC
from testkit.targets import FilesystemTarget


def test_quickstart_mirrors_sample_data_and_prints_status(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, MIRROR_V3_QUICKSTART_DIR=str(tmp_path), MIRROR_V3_METRICS_PORT=str(port))
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "quickstart.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # `plan` explained init's config before the run: its three partitions, each to its own chain.
    assert len(re.findall(rf"^  \S*\s*{TOPIC}\s+[012]\s", result.stdout, re.M)) >= 3, result.stdout
    # While it ran: its endpoints named and ready, `status --watch` refreshed with the live records' lag and state,
    # the lag series of /metrics shown; then a clean stop.
    assert f"running: http://127.0.0.1:{port}/metrics, /readyz" in result.stdout and "  /readyz: 200" in result.stdout
    refreshes = re.findall(r"every 2s, Ctrl-C to stop", result.stdout)
    assert len(refreshes) >= 2, result.stdout
    # Each row as the running process reports it: copying live, or in a Spark job's flush.
    assert re.search(rf"^  {TOPIC}\s+\d\s+(running|held-by-job)\s", result.stdout, re.M), result.stdout
    assert "mirror_v3_source_lag_offsets{" in result.stdout
    assert "stopping it with SIGTERM" in result.stdout and "mirror stopped with exit code 0" in result.stdout
    # status printed its summary and one row per mirror, each caught up (lag 0; the mirror has stopped, so no state).
    count = RECORDS_PER_PARTITION + LIVE_RECORDS_PER_PARTITION
    assert "3 mirrors: 0 lagging, 0 failed; lag 0 records" in result.stdout, result.stdout
    rows = re.findall(rf"^{TOPIC}\s+(\d)\s+-\s+0\s+-\s+\S+ ago$", result.stdout, re.M)
    assert sorted(rows) == ["0", "1", "2"], result.stdout
    assert (tmp_path / "quickstart.yaml").exists() and (tmp_path / "quickstart-mirror.log").exists()
    archive = FilesystemTarget(tmp_path / "mirror-data")
    for partition in range(3):
        assert [r.offset for r in archive.records(TOPIC, partition)] == list(range(count))
    # ... and the archive as a table, read back by name: every record, once.
    expected = ", ".join(f"partition {p}: {count} rows (offsets 0-{count - 1})" for p in range(3))
    assert f"  {expected}\n" in result.stdout, result.stdout
    assert "Traceback" not in result.stderr
