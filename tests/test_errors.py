"""The error family: every user-facing error has one base, carries its exit code and facts, and builds its
sentence from them; the exit code of a command is decided from the error alone."""

from __future__ import annotations

import ast
import copy
import pickle
from pathlib import Path

import pytest

from config.errors import ConfigError, DestinationCollisionError, FieldError, SelectedPartition
from config.secrets import ConfigReferenceError
from core.errors import (
    EXIT_CONFIG,
    EXIT_ENVIRONMENT,
    EXIT_FAILURE,
    DataLossError,
    MirrorV3Error,
    cli_line,
    exit_code_for,
)
from sinks.blob.chain import BlobRange, ChainProblem, CorruptChainError
from workers.spark_session import SparkStartError

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("core", "config", "kafka_clients", "telemetry", "sinks", "source", "workers", "supervisor", "commands")


def test_exit_codes_and_headlines_come_from_the_error() -> None:
    config = FieldError(("mirrors", 0, "topic"), "required field is missing")
    spark = SparkStartError("no java")
    lost = DataLossError("orders", 3, log_start=150, next_offset=100)
    assert [exit_code_for(e) for e in (config, spark, lost, OSError("disk"))] == [
        EXIT_CONFIG,
        EXIT_ENVIRONMENT,
        EXIT_FAILURE,
        EXIT_FAILURE,
    ]
    assert cli_line(config, "verify") == "invalid config: mirrors[0].topic: required field is missing"
    assert cli_line(spark, "run") == "cannot start Spark: no java"
    assert cli_line(lost, "status").startswith("status failed: source orders-3 log start offset 150")


def test_the_sentence_is_built_from_the_facts() -> None:
    lost = DataLossError("orders", 3, log_start=150, next_offset=100)
    assert lost.facts == {"topic": "orders", "partition": 3, "log_start": 150, "next_offset": 100}
    assert (lost.lost_first, lost.lost_last) == (100, 149)
    assert "offsets 100..149 were deleted" in str(lost)
    settings = ConfigReferenceError("clusters.prod.security.tls.ca-file", "cannot read /x.pem: No such file")
    assert isinstance(settings, ConfigError)
    assert (settings.field, settings.problem) == (
        "clusters.prod.security.tls.ca-file",
        "cannot read /x.pem: No such file",
    )


def test_a_config_error_learns_its_line_and_keeps_its_type_and_facts() -> None:
    first = SelectedPartition(0, "prod", "orders", 0)
    second = SelectedPartition(2, "prod", "orders", 0)
    collision = DestinationCollisionError(first, second, "orders", 0)
    located = collision.at_line(17)
    assert isinstance(located, DestinationCollisionError) and located.line == 17 and collision.line is None
    assert (located.path, located.first, located.second) == (("mirrors", 2), first, second)
    assert str(located).startswith("mirrors[2]: destination orders/0: ") and str(located).endswith(" (line 17)")
    assert located.at_line(3) is located  # a known line stays


def test_family_errors_copy_and_pickle_with_their_facts() -> None:
    chain = CorruptChainError(ChainProblem.GAP, ["0-9.parquet"], BlobRange(10, 19))
    lost = DataLossError("orders", 3, log_start=150, next_offset=100)
    for error in (chain, lost, FieldError(("a",), "b")):
        for again in (copy.copy(error), pickle.loads(pickle.dumps(error))):
            assert type(again) is type(error) and str(again) == str(error) and again.facts == error.facts


def test_every_error_class_of_the_product_is_in_the_family() -> None:
    # A user-facing failure that is not a MirrorV3Error would have no exit code or headline of its own.
    outside = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                    name = getattr(node.exc.func, "id", "")
                    if name == "RuntimeError":
                        outside.append(f"{path.relative_to(ROOT)}:{node.lineno} raises RuntimeError")
                if isinstance(node, ast.ClassDef):  # whatever its name says (JobCancelled is an error too)
                    bases = {getattr(base, "id", getattr(base, "attr", "")) for base in node.bases}
                    if bases & {"Exception", "RuntimeError", "ValueError"} and node.name != "MirrorV3Error":
                        outside.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} is outside the family")
    assert outside == [], "\n".join(outside)


@pytest.mark.parametrize("error", [ConfigError("LOG_LEVEL", "'loud' is not a log level"), SparkStartError("x")])
def test_family_members_are_mirror_v3_errors(error: Exception) -> None:
    assert isinstance(error, MirrorV3Error)
