"""`prepare-jvm`: record the Spark driver JVM's classes into the class cache once (workers.jvm_class_cache), so that
every later start maps them instead of loading them. A local session runs one small job of the kind every command
runs (`workers.range_job.run_tasks`: task numbers through mapPartitions, collected), then its JVM exits and writes
what it loaded; the archive is checked and put in place only when whole."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from config.model import SparkConfig
from core.errors import EXIT_ENVIRONMENT, MirrorV3Error
from workers.jvm_class_cache import (
    archive_of,
    archive_problem,
    install,
    java_binary,
    remove_leftovers,
    spark_jars,
    temporary_path,
)
from workers.jvm_logs import JvmEvent
from workers.range_job import JobSpec, run_tasks
from workers.spark_session import SparkLaunch, get_spark, jvm_property, shut_down_jvm

# The JVM writes its archive (about 140 MB) as it exits: seconds, not minutes.
RECORDING_TIMEOUT_S = 120.0


class ClassCacheError(MirrorV3Error):
    """The class archive could not be made: `directory` and why."""

    exit_code = EXIT_ENVIRONMENT
    headline = "cannot prepare the JVM"

    def __init__(self, directory: Path, problem: str) -> None:
        self.directory, self.problem = directory, problem
        super().__init__(f"{directory}: {problem}")


def prepare_class_archive(directory: Path, on_jvm_event: Callable[[JvmEvent], None]) -> tuple[Path, bool]:
    """The archive of this JDK and these jars in `directory`, and whether this call made it (False: it was there).
    Must run before anything else starts Spark in this process."""
    java, jars = java_binary(), spark_jars()
    if java is None:
        raise ClassCacheError(directory, "no java: set JAVA_HOME or put java on PATH")
    archive = archive_of(directory, java, jars)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        remove_leftovers(directory)
    except OSError as exc:
        raise ClassCacheError(directory, exc.strerror or str(exc)) from None
    if archive.is_file():
        return archive, False
    temporary = temporary_path(archive)
    try:
        session = get_spark(SparkConfig(master="local[2]"), SparkLaunch(record_classes=temporary), on_jvm_event)
        run_tasks(session, JobSpec("prepare-jvm", "default", "class archive"), 2, list)  # each task: its number
        java_home, class_path = jvm_property("java.home"), jvm_property("java.class.path")
        exit_code = shut_down_jvm(RECORDING_TIMEOUT_S)
        if exit_code != 0:
            problem = "did not exit in time" if exit_code is None else f"exited with {exit_code}"
            raise ClassCacheError(directory, f"the JVM recording the classes {problem}")
        unusable = archive_problem(java_home, class_path, temporary)
        if unusable is not None:
            raise ClassCacheError(directory, unusable)
        install(temporary, archive, java, jars)
    finally:
        temporary.unlink(missing_ok=True)
    return archive, True
