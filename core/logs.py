"""Operator logs: one line per event on stderr, `key=value` pairs (or JSON with LOG_FORMAT=json).

A JSON line carries the event's time, level, logger, message and its own fields, and, when the event has one, its
traceback (`exc_info`, one string: still one line). The key=value form shows a traceback only at DEBUG, so that a
fatal failure reads as one ERROR line. `schemas/mirror-v3.log-line.schema.json` is the JSON line's schema
(`log_line_schema`)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

from core.errors import first_line
from core.secrets import redact

_FIELDS = "mirror_v3_fields"


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, _FIELDS, {})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={stamp}.{int(record.msecs):03d}Z",
            f"level={record.levelname}",
            f"msg={_quote(record.getMessage())}",
        ]
        parts.extend(f"{key}={_quote(value)}" for key, value in fields.items())
        if record.exc_info and logging.getLogger().isEnabledFor(logging.DEBUG):
            parts.append(f"traceback={_quote(self.formatException(record.exc_info))}")
        return redact(" ".join(parts))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, _FIELDS, {})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, Any] = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(
            {
                key: value if isinstance(value, (int, float, bool)) or value is None else str(value)
                for key, value in fields.items()
                if key not in _JSON_KEYS
            }
        )
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry))


_JSON_KEYS = ("ts", "level", "logger", "msg", "exc_info")  # a JSON line's own: an event's fields never replace them


def log_line_schema() -> str:
    """The JSON Schema of a LOG_FORMAT=json line (schemas/mirror-v3.log-line.schema.json)."""
    scalar = {"type": ["string", "number", "boolean", "null"]}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mirror-v3 log line (LOG_FORMAT=json)",
        "description": (
            "One event on stderr, one JSON object per line. Besides the keys below, an event carries its own fields "
            "(`mirror`, `source_cluster`, `topic`, `partition`, `error`, `elapsed_ms`, ...), each a string, a number, "
            "a boolean or null. The JVM's own lines carry `jvm_logger`."
        ),
        "type": "object",
        "properties": {
            "ts": {"type": "string", "description": "When, UTC, to the millisecond: 2026-11-28T05:38:06.642Z."},
            "level": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]},
            "logger": {"type": "string", "description": "The logger: mirror_v3.<part>, or a library's own."},
            "msg": {"type": "string", "description": "What happened, in words; the same for every event of a kind."},
            "exc_info": {
                "type": "string",
                "description": "The traceback of the exception the event is about (a fatal failure's, say); absent "
                "when there is none.",
            },
        },
        "required": ["ts", "level", "logger", "msg"],
        "additionalProperties": scalar,
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def command_error(line: str, **fields: Any) -> None:
    """A command's last word on stderr (`invalid config: ...`): the line itself, or, when the logs are JSON, an
    ERROR event of logger mirror_v3.cli with `fields`, so that the last line of a crash-looping pod parses like
    every line before it."""
    if any(isinstance(handler.formatter, JsonFormatter) for handler in logging.getLogger().handlers):
        log_event(logging.getLogger("mirror_v3.cli"), logging.ERROR, line, **fields)
        return
    print(line, file=sys.stderr)


def setup_logging(level_name: str = "INFO", fmt: str = "kv") -> None:
    """Configure the root logger (config.runtime: LOG_LEVEL and LOG_FORMAT, checked already)."""
    level = logging.getLevelName(level_name)
    if not isinstance(level, int):
        level = logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party clients log their own view of failures (often at ERROR, often repeatedly); ours
    # reach the operator as one line naming the mirror. Their logs come back with LOG_LEVEL=DEBUG.
    for noisy in ("aiokafka", "kafka", "botocore", "aiobotocore", "urllib3", "librdkafka"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.CRITICAL)
    # py4j's DEBUG lines are every command sent to the JVM, Kafka options (SASL JAAS config) included:
    # never below WARNING, whatever LOG_LEVEL says.
    logging.getLogger("py4j").setLevel(logging.WARNING if level <= logging.DEBUG else logging.CRITICAL)
    if level > logging.DEBUG:
        handler.addFilter(_drop_py4j_root_records)


def _drop_py4j_root_records(record: logging.LogRecord) -> bool:
    # py4j logs some connection noise through the root logger ("Exception while sending command."
    # when the JVM stops), out of reach of the per-logger levels above.
    return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)


def log_event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={_FIELDS: fields})


def log_exception_event(
    logger: logging.Logger, level: int, message: str, exception: BaseException, **fields: Any
) -> None:
    """`log_event` of an event about `exception`, whose traceback travels with it: in a JSON line's `exc_info`, in a
    key=value line at DEBUG."""
    if logger.isEnabledFor(level):
        logger.log(level, message, exc_info=exception, extra={_FIELDS: fields})


def quiet_aiokafka_leaks() -> None:
    """Report what asyncio finds left behind as WARN (aiokafka's leaked handshake connections at DEBUG), on the
    running event loop.

    asyncio reports a future whose exception nobody retrieved, or a connection garbage-collected open, as an ERROR
    line with a traceback. In this process these are consequences, never causes: a failure's cause is the one ERROR
    line the supervisor writes, and the client futures it abandons on the way out (a fenced producer's sends, a
    cancelled aiokafka request) are reported after it. So: one WARN line (`asyncio report`) with the first line of
    the message and of the exception, the traceback at DEBUG. When a bootstrap connection's TLS or SASL handshake
    fails, aiokafka's `create_conn` leaves the connection open, and its report is noise: DEBUG only."""
    import asyncio

    loop = asyncio.get_running_loop()
    leaks = logging.getLogger("mirror_v3.aiokafka")
    reports = logging.getLogger("mirror_v3.asyncio")

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "")).strip()
        task = context.get("task")
        if message.startswith("Unclosed AIOKafkaConnection") or "AIOKafkaConnection._read" in repr(task):
            leaks.debug("%s", message.splitlines()[0] if message else "unclosed connection")
            return
        exception = context.get("exception")
        fields: dict[str, object] = {"report": message.splitlines()[0] if message else "unnamed"}
        if exception is not None:
            fields["error"] = first_line(exception, named=True)
        log_event(reports, logging.WARNING, "asyncio report", **fields)
        reports.debug("asyncio report detail: %s", context, exc_info=exception)

    loop.set_exception_handler(handler)


class SpellLog:
    """One WARN when a key (a source cluster) starts failing, one INFO when it works again: a helper that retries
    every interval says so once per spell, not once per round."""

    def __init__(self, logger: logging.Logger, failing: str, back: str) -> None:
        self._logger, self._failing_message, self._back_message = logger, failing, back
        self._failing: set[str] = set()

    def failed(self, key: str, **fields: Any) -> None:
        if key not in self._failing:
            self._failing.add(key)
            log_event(self._logger, logging.WARNING, self._failing_message, source_cluster=key, **fields)

    def worked(self, key: str) -> None:
        if key in self._failing:
            self._failing.discard(key)
            log_event(self._logger, logging.INFO, self._back_message, source_cluster=key)
