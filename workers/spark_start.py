"""Start the process's SparkSession and say so: `spark session ready` with the master and how long it took, the
line that tells an operator (and the bench) where start-up ends and work begins, for every command."""

from __future__ import annotations

import logging
import time

import anyio.to_thread

from config.model import SparkConfig
from core.errors import task_group_failures_unwrapped
from core.logs import log_event
from workers.jvm_logs import JvmEvent
from workers.spark_session import SparkLaunch, get_spark

log = logging.getLogger("mirror_v3.supervisor")
jvm_log = logging.getLogger("mirror_v3.spark")


def log_jvm_event(event: JvmEvent) -> None:
    """One line of the process's log per JVM event (its Java logger's class name, the first line of its exception);
    the Java stack trace follows at DEBUG, as the event `jvm stack trace`."""
    logger = event.logger.rsplit(".", 1)[-1]
    fields: dict[str, object] = {"jvm_logger": logger}
    if event.exception:
        fields["exception"] = event.exception.strip().splitlines()[0]
    if event.during_shutdown:
        fields["during_shutdown"] = True
    log_event(jvm_log, event.level, event.message, **fields)
    if event.exception and "\n" in event.exception.strip():
        log_event(jvm_log, logging.DEBUG, "jvm stack trace", jvm_logger=logger, exception=event.exception)


STILL_STARTING_EVERY_S = 5.0  # a start that takes longer is said to go on this often


async def start_spark(config: SparkConfig, launch: SparkLaunch) -> None:
    """In a worker thread (it takes seconds, a minute on a busy cluster: said every STILL_STARTING_EVERY_S, so a
    command is never silent meanwhile); SparkStartError when it cannot start."""
    began = time.monotonic()
    # The start's own failure (SparkStartError) passes as itself, not as a group of one.
    with task_group_failures_unwrapped():
        async with anyio.create_task_group() as waiting:
            waiting.start_soon(_say_still_starting, config.master, began)
            # Abandoned when cancelled (a mirror refused its start): the process exits without waiting for the JVM.
            await anyio.to_thread.run_sync(get_spark, config, launch, log_jvm_event, abandon_on_cancel=True)
            waiting.cancel_scope.cancel()
    elapsed_ms = round((time.monotonic() - began) * 1000)
    log_event(log, logging.INFO, "spark session ready", master=config.master, elapsed_ms=elapsed_ms)


async def _say_still_starting(master: str, began: float) -> None:
    while True:
        await anyio.sleep(STILL_STARTING_EVERY_S)
        elapsed_s = round(time.monotonic() - began)
        log_event(log, logging.INFO, "spark session still starting", master=master, elapsed_s=elapsed_s)
