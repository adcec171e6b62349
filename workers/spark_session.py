"""The one SparkSession of the process: the data plane every mirror's flush jobs run on."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from config.model import SparkConfig
from config.secrets import SECRET_KEY_PATTERN, remember

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()
_session: SparkSession | None = None


def session_conf(config: SparkConfig) -> dict[str, str]:
    conf = {
        "spark.master": config.master,
        "spark.driver.memory": config.driver_memory,
        "spark.app.name": "mirror-v3",
        # Jobs of all mirrors share the session; FAIR (one pool per mirror, set per job) keeps one backlog
        # from starving the others.
        "spark.scheduler.mode": "FAIR",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # A JVM out of heap exits at once (the mirror then reports "Spark JVM died") instead of
        # limping on with half-dead threads.
        # C1 only (TieredStopAtLevel=1): the driver JVM handles metadata, not records (blob destinations),
        # and C2's compiler threads competed with the tasks for the cores. Measured on 2 cores: session
        # start 6.9-7.6 s against 8.8-10.8 s, a small job 0.32-0.36 s against 0.63-0.66 s.
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG} -XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1"
        ),
        "spark.sql.shuffle.partitions": "4",
    }
    if config.master.startswith("local"):
        # A local session talks to nothing but itself: bind and advertise loopback only.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    for key, value in config.conf.items():
        if SECRET_KEY_PATTERN.search(key):
            remember(value)  # never printed, whatever logs it
    conf.update(config.conf)
    return conf


def get_spark(config: SparkConfig) -> SparkSession:
    """Create the session once per process (thread-safe); later calls return the same one."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        # Python workers must run the same interpreter (and so see the same packages) as the driver.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if config.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        for key, value in session_conf(config).items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise SparkStartError(_first_line(exc)) from exc
        session.sparkContext.setLogLevel(config.log_level)
        _session = session
        return session


class SparkStartError(RuntimeError):
    """The session could not be created (no usable Java, a bad spark.conf, an unreachable master)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def current_spark() -> SparkSession | None:
    """The session if it has been created; never creates or waits for one."""
    return _session


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            # The JVM may already be gone (killed, out of memory): stopping must not raise then.
            with contextlib.suppress(Exception):
                _session.stop()
            _session = None
