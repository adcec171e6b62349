"""The JVM's output as the process logs it: log4j JSON events, raw lines grouped, shutdown noise downgraded."""

from __future__ import annotations

import json
import logging
import os
import threading

from source.jvm_logs import JvmEvent, JvmLogRelay, parse_event, relevel


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


def test_log4j_events_keep_their_level_logger_and_stack_trace() -> None:
    line = event_json(
        "ERROR", "org.apache.spark.executor.Executor", "task failed", "java.lang.X: y\n\tat a.b(C.java:1)"
    )
    (event,) = relay_output([line.encode() + b"\n"])
    assert event == JvmEvent(
        logging.ERROR, "org.apache.spark.executor.Executor", "task failed", "java.lang.X: y\n\tat a.b(C.java:1)"
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


def test_errors_of_cancelled_tasks_and_of_the_shutdown_are_warnings_and_real_errors_stay() -> None:
    leak = JvmEvent(logging.ERROR, "org.apache.arrow.memory.BaseAllocator", "Memory was leaked by query. (2951168)")
    assert relevel(leak, stopping=False).level == logging.WARNING
    failure = JvmEvent(logging.ERROR, "org.apache.spark.scheduler.TaskSchedulerImpl", "Exception in statusUpdate")
    assert relevel(failure, stopping=False) == failure  # while running, an ERROR is an ERROR
    during = relevel(failure, stopping=True)
    assert (during.level, during.during_shutdown) == (logging.WARNING, True)


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
