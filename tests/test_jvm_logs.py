"""The JVM's output as the process logs it: log4j JSON events, raw lines grouped, shutdown noise downgraded."""

from __future__ import annotations

import json
import logging
import os
import threading

import pytest

from workers.jvm_logs import JvmEvent, JvmLogRelay, parse_event, relevel
from workers.spark_start import log_jvm_event


def event_json(level: str, logger: str, msg: str, exception: str | None = None) -> str:
    fields = {"ts": "2026-11-24T00:00:00.000Z", "level": level, "logger": logger, "msg": msg}
    if exception is not None:
        fields["exception"] = exception
    return json.dumps(fields)


def relay_output(chunks: list[bytes], stopping: bool = False) -> list[JvmEvent]:
    """What a relay emits for `chunks` written to its pipe, in order, then the pipe closed."""
    events: list[JvmEvent] = []
    relay = JvmLogRelay(events.append)
    relay.stopping = stopping
    read_end, write_end = os.pipe()
    thread = relay.attach(os.fdopen(read_end, "rb", buffering=0), "test")
    for chunk in chunks:
        os.write(write_end, chunk)
    os.close(write_end)
    thread.join(10)
    assert not thread.is_alive()
    return events


def test_log4j_events_keep_their_logger_and_stack_trace_and_an_error_is_a_warning() -> None:
    line = event_json(
        "ERROR", "org.apache.spark.executor.Executor", "task failed", "java.lang.X: y\n\tat a.b(C.java:1)"
    )
    (event,) = relay_output([line.encode() + b"\n"])
    assert event == JvmEvent(
        logging.WARNING, "org.apache.spark.executor.Executor", "task failed", "java.lang.X: y\n\tat a.b(C.java:1)"
    )
    assert parse_event("{not json") is None and parse_event('{"a": 1}') is None


def test_raw_lines_are_grouped_with_their_continuations_and_launcher_notices_are_debug() -> None:
    raw = (
        b"WARNING: Using incubator modules: jdk.incubator.vector\n"
        b'Exception in thread "main" java.lang.Error: boom\n\tat a.b(C.java:1)\n'
        b"Caused by: java.io.IOException: disk\n\t... 3 more\n"
        + event_json("WARN", "org.apache.spark.X", "after").encode()
        + b"\nlast words without a newline"
    )
    notice, trace, warn, last = relay_output([raw[:70], raw[70:]])  # split mid-line: lines are reassembled
    assert (notice.level, notice.logger) == (logging.DEBUG, "jvm")
    assert trace.level == logging.WARNING and trace.message.splitlines() == [
        'Exception in thread "main" java.lang.Error: boom',
        "\tat a.b(C.java:1)",
        "Caused by: java.io.IOException: disk",
        "\t... 3 more",
    ]
    assert (warn.message, warn.level) == ("after", logging.WARNING)
    assert last.message == "last words without a newline"


def test_the_jvms_errors_are_warnings_and_those_of_the_shutdown_are_marked() -> None:
    """The one ERROR line of a failure is the driver's own (issue: a read-only directory gave three)."""
    leak = JvmEvent(logging.ERROR, "org.apache.arrow.memory.BaseAllocator", "Memory was leaked by query. (2951168)")
    assert relevel(leak, stopping=False).level == logging.WARNING
    failure = JvmEvent(logging.ERROR, "org.apache.spark.executor.Executor", "Exception in task 0.0", "java.io.X: y")
    running = relevel(failure, stopping=False)
    assert (running.level, running.during_shutdown, running.exception) == (logging.WARNING, False, "java.io.X: y")
    during = relevel(failure, stopping=True)
    assert (during.level, during.during_shutdown) == (logging.WARNING, True)
    fatal = JvmEvent(logging.CRITICAL, "org.apache.spark.util.SparkUncaughtExceptionHandler", "Uncaught exception")
    assert relevel(fatal, stopping=False).level == logging.WARNING
    info = JvmEvent(logging.INFO, "org.apache.spark.SparkContext", "Running Spark version 4.0.0")
    assert relevel(info, stopping=False) == info


def test_a_raw_line_waits_for_its_continuation_only_briefly() -> None:
    events: list[JvmEvent] = []
    seen = threading.Event()

    def emit(event: JvmEvent) -> None:
        events.append(event)
        seen.set()

    relay = JvmLogRelay(emit)
    read_end, write_end = os.pipe()
    relay.attach(os.fdopen(read_end, "rb", buffering=0), "test")
    os.write(write_end, b"Terminating due to java.lang.OutOfMemoryError: Java heap space\n")
    assert seen.wait(5), "a lone raw line must be logged while the pipe stays open"
    assert events[0].message.startswith("Terminating due to")
    os.close(write_end)


def test_a_jvm_events_stack_trace_is_logged_at_debug_after_its_line(caplog: pytest.LogCaptureFixture) -> None:
    event = JvmEvent(
        logging.WARNING, "org.apache.spark.executor.Executor", "task failed", "java.io.X: y\n\tat a.b(C:1)"
    )
    with caplog.at_level(logging.DEBUG):
        log_jvm_event(event)
    line, stack = caplog.records
    assert (line.levelno, line.getMessage()) == (logging.WARNING, "task failed")
    assert line.mirror_v3_fields == {"jvm_logger": "Executor", "exception": "java.io.X: y"}  # type: ignore[attr-defined]
    assert (stack.levelno, stack.getMessage()) == (logging.DEBUG, "jvm stack trace")
    assert stack.mirror_v3_fields["exception"] == event.exception  # type: ignore[attr-defined]


async def test_a_slow_spark_start_is_said_to_go_on_until_it_is_ready(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command waiting on a busy cluster's Spark start is never silent for more than STILL_STARTING_EVERY_S."""
    import time

    import workers.spark_start
    from config.model import SparkConfig

    monkeypatch.setattr(workers.spark_start, "STILL_STARTING_EVERY_S", 0.05)
    monkeypatch.setattr(workers.spark_start, "get_spark", lambda *_: time.sleep(0.18))
    with caplog.at_level(logging.INFO, logger="mirror_v3.supervisor"):
        await workers.spark_start.start_spark(SparkConfig(master="spark://busy:7077"), None)  # type: ignore[arg-type]
    said = [record.getMessage() for record in caplog.records]
    assert said[:2] == ["spark session still starting"] * 2 and said[-1] == "spark session ready"
    assert caplog.records[0].mirror_v3_fields["master"] == "spark://busy:7077"  # type: ignore[attr-defined]


async def test_a_failed_spark_start_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not inside the task group's exception group: the command's one ERROR line names the cause."""
    import workers.spark_start
    from config.model import SparkConfig
    from workers.spark_session import SparkStartError

    def refuse(*_: object) -> None:
        raise SparkStartError("spark.master spark://gone:7077: no master accepts connections")

    monkeypatch.setattr(workers.spark_start, "get_spark", refuse)
    with pytest.raises(SparkStartError, match="no master accepts connections"):
        await workers.spark_start.start_spark(SparkConfig(master="spark://gone:7077"), None)  # type: ignore[arg-type]
