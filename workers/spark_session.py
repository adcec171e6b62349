"""The one SparkSession of the process: the data plane every mirror's flush jobs run on."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.model import SparkConfig
from core.errors import EXIT_ENVIRONMENT, MirrorV3Error, first_line
from core.secrets import SECRET_KEY_PATTERN, remember
from workers.jvm_class_cache import archive_path, recording_option, sharing_option
from workers.jvm_logs import JvmEvent, JvmLogRelay, log_plainly

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
LOG4J_EVENT_TEMPLATE = Path(__file__).with_name("log4j2-event.json")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()
_session: SparkSession | None = None
_relay: JvmLogRelay | None = None  # the JVM's output, for as long as the JVM lives
_start_failure: SparkStartError | None = None  # why the session could not start: every caller gets the one answer
_jvm: Any = None  # the driver JVM's process (spark-submit execs java)


@dataclass(frozen=True)
class SparkLaunch:
    """How this process's session starts, beyond the config's `spark` block: decided once by the CLI and passed to
    whatever starts or uses the session (the first get_spark starts it with these)."""

    class_cache: Path | None = None  # map the class-data-sharing archive of this directory (workers.jvm_class_cache)
    python_daemon: str | None = None  # the module the executors start their Python workers from; None: pyspark's own
    record_classes: Path | None = None  # instead of mapping an archive, the JVM writes every class it loaded here


def session_conf(config: SparkConfig, class_sharing: str = "", python_daemon: str | None = None) -> dict[str, str]:
    """The session's settings; `class_sharing` is the JVM option that maps or records a class archive,
    `python_daemon` the module the executors start their Python workers from (pyspark's own when None)."""
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
        # C1 only (TieredStopAtLevel=1): the driver JVM handles metadata, not records (no destination's records),
        # and C2's compiler threads competed with the tasks for the cores. Measured on 2 cores: session
        # start 6.9-7.6 s against 8.8-10.8 s, a small job 0.32-0.36 s against 0.63-0.66 s.
        # Serial GC: no record passes through the JVM (every destination's tasks read and write in Python), so
        # its heap holds Spark's bookkeeping only. G1's own structures and larger committed heap cost 85 MiB of
        # RSS in an idle driver (measured: 389 and 388 MiB with G1, 304 and 305 with Serial GC and a 32 MiB
        # initial heap); the jobs' CPU and wall time did not change.
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG} -Dmirror_v3.log4j2.template={LOG4J_EVENT_TEMPLATE} "
            f"-XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms32m {class_sharing}"
        ).strip(),
        # The plan text each job posts to Spark's listeners (no UI reads it here): the simple form costs less JVM
        # CPU per job than the default formatted one (measured 0.154-0.189 against 0.162-0.209 s per 2-task job).
        "spark.sql.ui.explainMode": "simple",
        "spark.sql.shuffle.partitions": "4",
    }
    if python_daemon is not None:
        conf["spark.python.daemon.module"] = python_daemon
    if config.master.startswith("local"):
        # A local session talks to nothing but itself: bind and advertise loopback only.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    for key, value in config.conf.items():
        if SECRET_KEY_PATTERN.search(key):
            remember(value)  # never printed, whatever logs it
    conf.update(config.conf)
    return conf


def get_spark(
    config: SparkConfig, launch: SparkLaunch, on_jvm_event: Callable[[JvmEvent], None] = log_plainly
) -> SparkSession:
    """Create the session once per process (thread-safe) as `config` and `launch` say; later calls return the same
    one, or raise the same SparkStartError (a start that failed is not tried again until stop_spark). The JVM's
    output goes to `on_jvm_event` (see workers.jvm_logs), as the first call says. With `launch.record_classes`, the
    JVM writes every class it loaded there when it exits (see shut_down_jvm)."""
    global _session, _start_failure
    with _lock:
        if _session is not None:
            return _session
        if _start_failure is not None:
            raise _start_failure
        # Python workers must run the same interpreter (and so see the same packages) as the driver.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if config.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        try:
            check_master_reachable(config.master)
        except SparkStartError as exc:
            _start_failure = exc
            raise
        if launch.record_classes is not None:
            class_sharing = recording_option(launch.record_classes)
        elif launch.class_cache is not None:
            class_sharing = sharing_option(archive_path(launch.class_cache))
        else:
            class_sharing = ""
        conf = session_conf(config, class_sharing, launch.python_daemon)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            _launch_jvm(conf, on_jvm_event)
            session = builder.getOrCreate()
        except Exception as exc:
            reason = first_line(exc, named=True)
            if config.master.startswith("spark://"):
                # Spark's own words are about its calls; the operator needs to know which master would not take us.
                reason = f"spark.master {config.master}: the master did not accept the application ({reason})"
            _start_failure = SparkStartError(reason)
            raise _start_failure from exc
        session.sparkContext.setLogLevel(config.log_level)
        if _relay is not None:
            _relay.stopping = False  # a new session on the JVM a stopped one left running
        _session = session
        return session


def _launch_jvm(conf: dict[str, str], on_jvm_event: Callable[[JvmEvent], None]) -> None:
    """Start the driver JVM with its stdout and stderr piped to a JvmLogRelay (pyspark would let it inherit
    ours), once per process: a stopped session leaves the JVM running for the next one. The pipe is read
    from before the launch, so a JVM that fails to start is heard too."""
    global _relay, _jvm
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # type: ignore[attr-defined]
        return
    relay = JvmLogRelay(on_jvm_event)
    read_end, write_end = os.pipe()
    relay.attach(os.fdopen(read_end, "rb", buffering=0), "output")
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": write_end, "stderr": write_end})  # type: ignore[no-untyped-call]
    finally:
        os.close(write_end)  # the JVM holds its own copy: the relay sees the end when the JVM exits
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    _relay, _jvm = relay, gateway.proc


MASTER_CONNECT_TIMEOUT_S = 5.0


def check_master_reachable(master: str, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """A standalone master (spark://host:port[,host:port...]) that no address of accepts a connection fails
    now, naming it: Spark itself would retry registering for a minute and then fail with its own internals."""
    if not master.startswith("spark://"):
        return
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            return
        except OSError as exc:
            problems.append(
                f"{address}: {exc.strerror or exc}" if not isinstance(exc, TimeoutError) else f"{address}: timed out"
            )
    raise SparkStartError(f"spark.master {master}: no master accepts connections ({'; '.join(problems)})")


class SparkStartError(MirrorV3Error):
    """The session could not be created (no usable Java, a bad spark.conf, an unreachable master)."""

    exit_code = EXIT_ENVIRONMENT
    headline = "cannot start Spark"


def started_spark() -> SparkSession:
    """The session get_spark started earlier in this process, for the jobs that follow a command's start; never
    starts or waits for one."""
    if _session is None:
        raise SparkStartError("no session has been started in this process")
    return _session


def current_spark() -> SparkSession | None:
    """The session if it has been created; never creates or waits for one."""
    return _session


def jvm_property(name: str) -> str:
    """A system property of the running driver JVM (java.home, java.class.path, ...)."""
    assert _session is not None, "jvm_property without a session"
    return str(_session.sparkContext._jvm.java.lang.System.getProperty(name))  # type: ignore[union-attr]


def shut_down_jvm(timeout_s: float) -> int | None:
    """Stop the session and let the JVM exit as it does when this process ends (its stdin closes); its exit code, or
    None if it has not exited within `timeout_s` (it goes on exiting on its own)."""
    global _jvm
    import subprocess

    from pyspark import SparkContext

    stop_spark()
    jvm, _jvm = _jvm, None
    if jvm is None:
        return None
    if _relay is not None:
        _relay.stopping = True
    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None  # type: ignore[attr-defined]
    with contextlib.suppress(OSError):
        jvm.stdin.close()
    try:
        return int(jvm.wait(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        return None


def stop_spark(wait_for_start: bool = True) -> bool:
    """Stop the session, if there is one. A session still starting is waited for, unless `wait_for_start` is
    False: then nothing is stopped (False), and the JVM ends with this process, as it exits when its stdin
    (a pipe from this process) closes."""
    if not _lock.acquire(blocking=wait_for_start):
        return False
    try:
        _stop_locked()
    finally:
        _lock.release()
    return True


def _stop_locked() -> None:
    global _session, _start_failure
    _start_failure = None
    if _relay is not None:
        _relay.stopping = True  # what the JVM says from here on is about its own shutdown
    if _session is not None:
        # The JVM may already be gone (killed, out of memory): stopping must not raise then.
        with contextlib.suppress(Exception):
            _session.stop()
        _session = None
