"""Log lines: key=value and JSON formats, and secrets redacted from whatever a library logs."""

from __future__ import annotations

import asyncio
import json
import logging

import jsonschema
import pytest

from core.logs import (
    JsonFormatter,
    KeyValueFormatter,
    command_error,
    log_event,
    log_exception_event,
    log_line_schema,
    quiet_aiokafka_leaks,
    setup_logging,
)
from core.secrets import REDACTED, remember


def record(message: str, exc_info: BaseException | None = None, **fields: object) -> logging.LogRecord:
    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    logger = logging.getLogger("test.logs")
    logger.handlers[:] = [Capture()]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if exc_info is None:
        log_event(logger, logging.WARNING, message, **fields)
    else:
        log_exception_event(logger, logging.WARNING, message, exc_info, **fields)
    return captured[0]


def test_key_value_line() -> None:
    line = KeyValueFormatter().format(record("flushed", mirror="m-0", count=3, path="a b"))
    assert line.split(" ", 1)[1] == 'level=WARNING msg=flushed mirror=m-0 count=3 path="a b"'


def test_json_line() -> None:
    entry = json.loads(JsonFormatter().format(record("flushed", mirror="m-0", count=3)))
    assert (entry["level"], entry["msg"], entry["mirror"], entry["count"]) == ("WARNING", "flushed", "m-0", 3)
    assert entry["logger"] == "test.logs" and "exc_info" not in entry
    jsonschema.validate(entry, json.loads(log_line_schema()))


def failure() -> BaseException:
    try:
        raise ValueError("the cause")
    except ValueError as exc:
        return exc


def test_an_events_exception_is_its_traceback_in_one_json_line_and_in_key_value_only_at_debug() -> None:
    line = JsonFormatter().format(record("mirror failed", exc_info=failure(), mirror="m-0", msg="not the message"))
    assert "\n" not in line  # one line per event, the traceback's lines inside the string
    entry = json.loads(line)
    jsonschema.validate(entry, json.loads(log_line_schema()))
    assert entry["msg"] == "mirror failed"  # an event's field never replaces a line's own key
    assert entry["exc_info"].startswith("Traceback (most recent call last):")
    assert entry["exc_info"].endswith("ValueError: the cause")
    root = logging.getLogger()
    level = root.level
    try:
        root.setLevel(logging.INFO)
        assert "traceback=" not in KeyValueFormatter().format(record("mirror failed", exc_info=failure()))
        root.setLevel(logging.DEBUG)
        assert "ValueError: the cause" in KeyValueFormatter().format(record("mirror failed", exc_info=failure()))
    finally:
        root.setLevel(level)


def test_a_commands_last_word_follows_the_log_format(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("INFO", "kv")
        command_error("invalid config: mirrors[0].topic: required", exit_code=2)
        assert capsys.readouterr().err == "invalid config: mirrors[0].topic: required\n"
        setup_logging("INFO", "json")
        command_error("invalid config: mirrors[0].topic: required", exit_code=2)
        (line,) = capsys.readouterr().err.splitlines()
        entry = json.loads(line)
        jsonschema.validate(entry, json.loads(log_line_schema()))
        assert (entry["level"], entry["logger"], entry["exit_code"]) == ("ERROR", "mirror_v3.cli", 2)
        assert entry["msg"] == "invalid config: mirrors[0].topic: required"
    finally:
        root.handlers[:], root.level = handlers, level


def test_remembered_secrets_never_reach_a_line() -> None:
    secret = remember('s3cr"et-value-for-the-test')
    leaky = record(f"Authorization: Credential={secret}/x", header=f"token {secret}")
    for formatter in (KeyValueFormatter(), JsonFormatter()):
        line = formatter.format(leaky)
        assert "et-value-for-the-test" not in line, line
        assert REDACTED in line


def test_short_values_are_not_treated_as_secrets() -> None:
    remember("ab")
    assert "ab" in KeyValueFormatter().format(record("about a tab"))


async def test_asyncio_reports_are_one_warn_line_and_aiokafka_handshake_leaks_are_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failure's one ERROR line is the supervisor's: what asyncio finds abandoned after it is a WARN."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    try:
        quiet_aiokafka_leaks()
        caplog.set_level(logging.DEBUG)
        loop.call_exception_handler({"message": "Unclosed AIOKafkaConnection\nconn: <AIOKafkaConnection host=h>"})
        fenced = RuntimeError("ProducerFenced: epoch 3\nmore")
        loop.call_exception_handler({"message": "Future exception was never retrieved", "exception": fenced})
    finally:
        loop.set_exception_handler(previous)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.DEBUG, "Unclosed AIOKafkaConnection") in levels
    (warn,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warn.getMessage() == "asyncio report"
    assert warn.mirror_v3_fields == {  # type: ignore[attr-defined]
        "report": "Future exception was never retrieved",
        "error": "RuntimeError: ProducerFenced: epoch 3",
    }
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
