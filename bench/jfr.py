"""Java Flight Recorder for the Spark JVM: where its CPU goes, by frame.

`jvm_options(path)` gives the `spark.driver.extraJavaOptions` that record a JFR file while the JVM runs (written at
exit); `summarise(path)` reads the execution samples back with the JDK's `jfr` tool and counts them by thread and by
frame (leaf, and inclusive).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from workers.spark_session import LOG4J_CONFIG


def jvm_options(recording: Path) -> str:
    """The driver's usual options plus a flight recording ('profile' settings: a stack sample every 10-20 ms)."""
    return (
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG} -XX:+ExitOnOutOfMemoryError "
        f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true"
    )


@dataclass(frozen=True)
class JfrSummary:
    samples: int
    threads: list[tuple[str, float]]  # thread kind, share of samples
    leaves: list[tuple[str, float]]  # innermost frame, share
    inclusive: list[tuple[str, float]]  # method anywhere on the stack, share


def summarise(recording: Path, top: int = 25) -> JfrSummary:
    tool = shutil.which("jfr")
    if tool is None:
        raise RuntimeError("the JDK's jfr tool is not on the PATH")
    text = subprocess.run(
        [tool, "print", "--events", "jdk.ExecutionSample", str(recording)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    threads: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    events = text.split("jdk.ExecutionSample {")[1:]
    for event in events:
        thread = re.search(r'sampledThread = "([^"]*)"', event)
        threads[re.sub(r"\d+", "N", thread.group(1)) if thread else "?"] += 1
        stack = re.search(r"stackTrace = \[(.*?)\n\s*\]", event, re.S)
        if stack is None:
            continue
        frames = [
            re.sub(r"\s+line:.*", "", line.strip())
            for line in stack.group(1).strip().splitlines()
            if line.strip() and not line.strip().startswith("...")
        ]
        if frames:
            leaves[frames[0]] += 1
        for method in {frame.split("(")[0] for frame in frames}:
            inclusive[method] += 1
    count = max(1, len(events))
    return JfrSummary(
        samples=len(events),
        threads=[(name, n / count) for name, n in threads.most_common(10)],
        leaves=[(name, n / count) for name, n in leaves.most_common(top)],
        inclusive=[(name, n / count) for name, n in inclusive.most_common(top * 3)],
    )


def print_summary(summary: JfrSummary) -> None:
    print(f"JFR: {summary.samples} execution samples of the Spark JVM")
    for title, rows in (("threads", summary.threads), ("innermost frames", summary.leaves)):
        print(f"  {title}:")
        for name, share in rows:
            print(f"    {share * 100:5.1f} %  {name[:150]}")
    print("  methods anywhere on the stack (Kafka, row conversion, Arrow):")
    for name, share in summary.inclusive:
        if re.search(r"kafka|arrow|Arrow|Unsafe|toArray|serve|Serializ", name):
            print(f"    {share * 100:5.1f} %  {name[:150]}")
