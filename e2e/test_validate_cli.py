"""`python -m supervisor validate` as a user runs it: a subprocess, exit codes, the stdout/stderr contract.

Every kind of bad config (and every example) is checked in-process by tests/test_config.py; here, one of each
class through the real command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from testkit.mirror_run import run_cli

GOOD = """\
destination:
  type: filesystem
  root: /data/mirror
mirrors:
  - name: orders-0
    source:
      bootstrap-servers: kafka:9092
    topic: orders
    partition: 0
  - name: orders-1
    source:
      bootstrap-servers: kafka:9092
    topic: orders
    partition: 1
"""


def assert_user_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == "", result.stdout
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("invalid config: ")]) == 1


def test_the_good_base_config_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{path}: valid (2 mirrors, destination filesystem)"]


def test_field_path_comes_first(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(GOOD.replace("partition: 1", "partition: -1"), encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert_user_error(result, "invalid config: mirrors[1].partition: Expected int >= 0, got -1 (line 14)\n")


def test_yaml_error_names_file_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("destination: {type: filesystem\nmirrors: []\n", encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert_user_error(
        result,
        f"invalid config: {path} line 2 column 8: invalid YAML: expected ',' or '}}', but got ':' "
        "(while parsing a flow mapping at line 1)",
    )


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    result = run_cli("validate", "--config", str(path))
    assert_user_error(result, f"invalid config: {path}: config file not found")


def test_no_arguments() -> None:
    result = run_cli()
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert "usage:" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_without_config() -> None:
    result = run_cli("validate")
    assert result.returncode == 2, result
    assert "--config" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_shard_out_of_range_is_a_user_error_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = run_cli("run", "--config", str(path), "--shard", "3/3")
    assert_user_error(result, "invalid config: --shard: shard index 3 is out of range for 3 shards (0..2)\n")
    result = run_cli("plan", "--config", str(path), env={"MIRROR_V3_SHARD": "x"})
    assert_user_error(result, "invalid config: MIRROR_V3_SHARD: expected I/N with N >= 1")


def test_a_bad_runtime_setting_in_the_environment_is_a_user_error_naming_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = run_cli("validate", "--config", str(path), env={"MIRROR_V3_METRICS_PORT": "http"})
    assert_user_error(
        result, "invalid config: MIRROR_V3_METRICS_PORT: 'http' is not a port number (0-65535; 0 disables)\n"
    )


def test_plan_of_a_bad_selection_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    selection = GOOD.replace("    topic: orders\n    partition: 1\n", "    topic-regex: 'orders['\n")
    path.write_text(selection, encoding="utf-8")
    result = run_cli("plan", "--config", str(path))
    assert_user_error(result, "invalid config: mirrors[1].topic-regex: invalid regular expression 'orders[': ")


def test_a_renamed_key_of_an_earlier_release_still_validates_with_a_warn(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GOOD + "spark:\n  max-offsets-per-read: 200000\n", encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    [warn] = [line for line in result.stderr.splitlines() if "deprecated config key" in line]
    assert "WARN" in warn and "spark.max-offsets-per-read" in warn and "spark.max-offsets-per-job" in warn, warn


def test_every_problem_of_a_file_is_named_at_once_each_on_its_line(tmp_path: Path) -> None:
    """Two misspelt keys and a misspelt value: one run names all three, in the file's order, each with what was
    meant; with LOG_FORMAT=json each is a JSON line."""
    path = tmp_path / "typos.yaml"
    typos = GOOD.replace("  root: /data/mirror\n", "  root: /data/mirror\n  compresion: zstd\n")
    typos = typos.replace(
        "      bootstrap-servers: kafka:9092\n    topic: orders\n    partition: 1\n",
        (
            "      bootstrap-servers: kafka:9092\n      pool-interval-ms: 100\n      isolation-level: read_comitted\n"
            "    topic: orders\n    partition: 1\n"
        ),
    )
    path.write_text(typos, encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.splitlines() == [
        "invalid config: destination.compresion: unknown field; did you mean compression? (line 4)",
        "invalid config: mirrors[1].source.pool-interval-ms: unknown field; did you mean poll-interval-ms? (line 14)",
        "invalid config: mirrors[1].source.isolation-level: invalid value 'read_comitted': did you mean "
        "read_committed? (one of: read_committed, read_uncommitted) (line 15)",
    ], result.stderr
    as_json = run_cli("validate", "--config", str(path), env={"LOG_FORMAT": "json"})
    events = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert [(e["level"], e["logger"], e["exit_code"]) for e in events] == [("ERROR", "mirror_v3.cli", 2)] * 3
    assert [e["msg"] for e in events] == result.stderr.splitlines()


RESTORE = """\
archive:
  type: filesystem
  root: /data/mirror
restore:
  - topic: orders
destination:
  type: kafka
  bootstrap-servers: kafka:9092
"""


def test_a_restore_config_validates_as_restore_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "restore.yaml"
    path.write_text(RESTORE, encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{path}: valid (restore config: 1 entry from the filesystem archive)"]
    path.write_text(RESTORE.replace("  - topic: orders", "  - topik: orders"))
    assert_user_error(
        run_cli("validate", "--config", str(path)),
        "invalid config: restore[0].topik: unknown field; did you mean topic?",
    )


def test_init_writes_a_starting_config_that_validate_accepts_and_never_overwrites_one(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    made = run_cli(
        "init", "--bootstrap-servers", "kafka:9092", "--destination", "s3://archive/prod", "--output", str(path)
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"wrote {path}: a starting config. Next:") and "validate --config" in made.stdout
    checked = run_cli("validate", "--config", str(path))
    assert checked.stdout.splitlines() == [f"{path}: valid (1 selection, destination s3)"], checked.stderr
    again = run_cli("init", "--bootstrap-servers", "kafka:9092", "--destination", "./elsewhere", "--output", str(path))
    assert_user_error(again, f"invalid config: {path}: exists already: choose another --output, or --force")
    assert "s3" in path.read_text()  # untouched
    assert_user_error(
        run_cli("init", "--bootstrap-servers", "kafka:9092", "--destination", "gs://b", "--output", "-"),
        "invalid config: --destination: 'gs://b': expected a directory, s3://bucket/prefix or kafka://host:port",
    )
