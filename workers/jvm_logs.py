"""Spark's JVM output, logged again through the process's own logging.

The driver JVM writes one JSON object per log4j event to its stderr (source/log4j2.properties); this module
reads its stdout and stderr through pipes and logs each event through Python's logging, so every line the
process prints has one format (key=value, or JSON with LOG_FORMAT=json), one redaction and one level
setting. A Java stack trace is one field (`exception`) of its event. Lines that are not log4j events (the
launcher's notices, a crashing JVM's last words, a local Python worker's traceback) are grouped, a line
that continues a stack trace joining the line before, and logged as one event each.

Levels: an event keeps its level up to WARN; the JVM's ERROR and FATAL events are logged as WARN. A failure that
matters reaches the operator as exactly one ERROR line, the driver's own about the job or mirror (its typed error
carries the cause across the boundary), and Spark logs ERROR for task failures it then retries, or that the driver
retries and recovers from. Two kinds are marked, so a reader can tell them from a failure:
- tasks the driver cancelled (a drain out of time, a stopped mirror) free their Arrow memory late, and
  Arrow and the task report that as ERROR;
- once the driver stops the session, the JVM's errors are about its own shutdown (executors refusing
  status updates, ...): marked `during_shutdown`.

Reading the pipes also keeps the JVM's stdout off the process's stdout, which carries command output only.
When the process is killed, the JVM's remaining output goes nowhere, instead of into the log as errors
of a process that no longer exists.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
# (logger, start of the message) of the ERROR events a cancelled task causes.
CANCELLED_TASK_EVENTS = (
    ("org.apache.arrow.memory.BaseAllocator", "Memory was leaked"),
    ("org.apache.spark.TaskContextImpl", "Error in TaskCompletionListener"),
)
# Printed by the JVM launcher at every start (Spark enables the vector module): no news.
LAUNCHER_NOTICES = (re.compile(r"^WARNING: Using incubator modules"),)
# A raw line that continues the one before it: a stack frame, a cause, an indented detail.
_CONTINUATION = re.compile(r"^(\s|Caused by:|\.\.\. \d+ more|Traceback|\w+(\.\w+)*(Error|Exception)\b)")
_QUIET_SECONDS = 0.05  # raw lines that arrive within this of each other may belong together


@dataclass(frozen=True)
class JvmEvent:
    level: int
    logger: str  # the log4j logger (a Java class name); "jvm" for raw output
    message: str
    exception: str | None = None
    during_shutdown: bool = False


def parse_event(line: str) -> JvmEvent | None:
    """A log4j JSON event, or None when the line is raw output."""
    if not line.startswith("{"):
        return None
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict) or "msg" not in fields or "level" not in fields:
        return None
    exception = fields.get("exception")
    return JvmEvent(
        level=LEVELS.get(str(fields["level"]), logging.WARNING),
        logger=str(fields.get("logger", "")),
        message=str(fields["msg"]),
        exception=str(exception) if exception else None,
    )


def raw_event(text: str) -> JvmEvent:
    level = logging.DEBUG if any(notice.match(text) for notice in LAUNCHER_NOTICES) else logging.WARNING
    return JvmEvent(level, "jvm", text)


def relevel(event: JvmEvent, stopping: bool) -> JvmEvent:
    """The level the event is logged at (see the module's docstring)."""
    if event.level < logging.ERROR:
        return event
    if any(event.logger == logger and event.message.startswith(start) for logger, start in CANCELLED_TASK_EVENTS):
        return JvmEvent(logging.WARNING, event.logger, event.message, event.exception)
    return JvmEvent(logging.WARNING, event.logger, event.message, event.exception, during_shutdown=stopping)


def continues(line: str) -> bool:
    return bool(_CONTINUATION.match(line))


class JvmLogRelay:
    """Reads the JVM's pipes in daemon threads until they close and hands each event, relevelled, to `emit`
    (the caller's logging); `stopping` is set when the session stops."""

    def __init__(self, emit: Callable[[JvmEvent], None]) -> None:
        self._emit_event = emit
        self.stopping = False

    def attach(self, stream: IO[bytes], name: str) -> threading.Thread:
        thread = threading.Thread(target=self._read, args=(stream,), name=f"jvm-{name}", daemon=True)
        thread.start()
        return thread

    def _read(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        pending = b""
        raw: list[str] = []  # raw lines waiting for their continuation
        while True:
            if raw and not select.select([fd], [], [], _QUIET_SECONDS)[0]:
                self._emit(raw_event("\n".join(raw)))
                raw = []
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for data in lines:
                line = data.decode("utf-8", "replace").rstrip("\r")
                event = parse_event(line)
                if event is None and raw and continues(line):
                    raw.append(line)
                    continue
                if raw:
                    self._emit(raw_event("\n".join(raw)))
                    raw = []
                if event is not None:
                    self._emit(event)
                elif line.strip():
                    raw.append(line)
        if pending.strip():
            raw.append(pending.decode("utf-8", "replace"))
        if raw:
            self._emit(raw_event("\n".join(raw)))

    def _emit(self, event: JvmEvent) -> None:
        self._emit_event(relevel(event, self.stopping))


def log_plainly(event: JvmEvent) -> None:
    """For callers without a log format of their own (the bench, scripts): the message and its stack trace."""
    message = event.message if event.exception is None else f"{event.message}\n{event.exception}"
    logging.getLogger("mirror_v3.spark").log(event.level, "%s: %s", event.logger, message)
