"""`python -m supervisor validate` as a user runs it: a subprocess, exit codes, stdout/stderr contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

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


def edit(old: str, new: str, *, count: int = 1) -> str:
    """GOOD with the `count`-th occurrence of `old` replaced by `new`."""
    head, sep, tail = GOOD.partition(old)
    for _ in range(count - 1):
        more_head, sep, tail = tail.partition(old)
        head += old + more_head
    assert sep, f"{old!r} occurs fewer than {count} times in GOOD"
    return head + new + tail


# (id, file contents, the field path stderr must name)
BAD_CONFIGS: list[tuple[str, str, str]] = [
    ("missing-partition", edit("    partition: 1\n", ""), "mirrors[1].partition: "),
    ("negative-partition", edit("partition: 1", "partition: -1"), "mirrors[1].partition: "),
    ("partition-as-string", edit("partition: 0", "partition: 'zero'"), "mirrors[0].partition: "),
    ("unknown-top-level-key", GOOD + "retention: 7d\n", "retention: "),
    ("unknown-key-in-mirror", edit("    topic: orders\n", "    topic: orders\n    offset: 5\n"), "mirrors[0].offset: "),
    (
        "unknown-key-in-source",
        edit("kafka:9092\n", "kafka:9092\n      security.protocol: SSL\n", count=2),
        'mirrors[1].source["security.protocol"]: ',
    ),
    (
        "unknown-key-in-flush",
        edit("  root: /data/mirror\n", "  root: /data/mirror\n  flush: {max-time: 5}\n"),
        "destination.flush.max-time: ",
    ),
    ("bad-destination-type", edit("type: filesystem", "type: gcs"), "destination.type: "),
    ("missing-destination-type", edit("  type: filesystem\n", ""), "destination.type: "),
    ("missing-root", edit("  root: /data/mirror\n", ""), "destination.root: "),
    (
        "flush-max-time-ms-zero",
        edit("  root: /data/mirror\n", "  root: /data/mirror\n  flush:\n    max-time-ms: 0\n"),
        "destination.flush.max-time-ms: ",
    ),
    (
        "max-bytes-wrong-type",
        edit("  root: /data/mirror\n", "  root: /data/mirror\n  flush:\n    max-bytes: [1]\n"),
        "destination.flush.max-bytes: ",
    ),
    ("duplicate-mirror-names", edit("name: orders-1", "name: orders-0"), "mirrors[1].name: "),
    ("same-destination-directory", edit("partition: 1", "partition: 0"), "mirrors[1]: "),
    (
        "destination-name-override-collision",
        edit(
            "topic: orders\n    partition: 1",
            "topic: orders-v2\n    partition: 0\n    destination-name-override: orders",
        ),
        "mirrors[1]: ",
    ),
    ("empty-mirrors-list", GOOD.split("mirrors:")[0] + "mirrors: []\n", "mirrors: "),
    (
        "bad-isolation-level",
        edit("kafka:9092\n", "kafka:9092\n      isolation-level: serializable\n"),
        "mirrors[0].source.isolation-level: ",
    ),
    (
        "bad-on-data-loss",
        edit("kafka:9092\n", "kafka:9092\n      on-data-loss: warn\n", count=2),
        "mirrors[1].source.on-data-loss: ",
    ),
    ("invalid-mirror-name", edit("name: orders-1", "name: 'orders #1'"), "mirrors[1].name: "),
    (
        "destination-name-override-with-slash",
        edit("partition: 0\n", "partition: 0\n    destination-name-override: ../../etc\n"),
        "mirrors[0].destination-name-override: ",
    ),
    (
        "undefined-env-variable",
        edit("kafka:9092", "${MIRROR_V3_TEST_UNDEFINED}", count=2),
        "mirrors[1].source.bootstrap-servers: ",
    ),
    ("duplicate-key", edit("    partition: 0\n", "    partition: 0\n    partition: 2\n"), "mirrors[0].partition: "),
    (
        "yaml-syntax-error",
        edit("    topic: orders\n", "    topic: [orders\n", count=2),
        "line 14 column 14: invalid YAML: ",
    ),
    ("top-level-list", "- destination\n- mirrors\n", "top level must be a mapping"),
    ("empty-file", "", "config file is empty"),
]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MIRROR_V3_TEST_")}
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == "", result.stdout
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_at_least_fifteen_bad_configs() -> None:
    assert len({text for _, text, _ in BAD_CONFIGS}) >= 15
    assert GOOD not in {text for _, text, _ in BAD_CONFIGS}


def test_the_good_base_config_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{path}: valid (2 mirrors, destination filesystem)"]


@pytest.mark.parametrize(("text", "field"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_exits_2_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(text, encoding="utf-8")
    result = run_cli("validate", "--config", str(path))
    assert_user_error(result, field)
    assert result.stderr.startswith("invalid config: "), result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("invalid config: ")]
    assert len(lines) == 1, result.stderr


def test_field_path_comes_first(tmp_path: Path) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(edit("partition: 1", "partition: -1"), encoding="utf-8")
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


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_valid(path: Path) -> None:
    result = run_cli("validate", "--config", str(path.relative_to(REPO)))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith(f"{path.relative_to(REPO)}: valid ("), lines[0]
    assert "Traceback" not in result.stderr


def test_there_are_examples() -> None:
    assert EXAMPLES, "examples/*.yaml is empty"


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    result = run_cli("validate", "--config", str(path))
    assert_user_error(result, f"invalid config: {path}: config file not found")


def test_config_is_a_directory(tmp_path: Path) -> None:
    assert_user_error(run_cli("validate", "--config", str(tmp_path)), f"{tmp_path}: ")


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
