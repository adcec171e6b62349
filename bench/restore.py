"""Restore and verify: `python -m supervisor restore` (offsets preserve and renumber) and `python -m supervisor
verify`, each timed as a whole command next to a raw confluent-kafka baseline from the same run.

A backlog in a topic of its own on the source broker is drained by the raw consume loop, then archived by the real
mirror CLI into a directory (one mirror per partition, as throughput's filesystem path), so the archive is exactly
what mirror-v3 writes. Then, one command at a time (each to completion, psutil sampling its process tree):

- `verify --config <the mirror's own config file>`: the archive compared with the source record by record; it must
  exit 0 with every record `equal`. Its baseline is the raw consume of the same partitions (verify reads them and
  the archive).
- The source topic is deleted (a restore reads only the archive) and a destination broker is started for the
  scenario, as throughput's Kafka paths do: a restore goes to a cluster of its own (another cluster, or the source
  cluster rebuilt), and the restored topics then share no log, page cache or request queue with the source's
  backlog and verify's reads. Its JVM starts only now, so it costs verify nothing.
- The raw produce baseline, on that broker: the archive's records (keys, values, timestamps, headers) read into
  memory first, then produced into a fresh topic with the same partitions by one confluent-kafka producer with the
  preserve mode's settings (acks=all, idempotent; delivery reports only for errors), timed until the last
  acknowledgement.
- `restore` in each offsets mode into a fresh topic with the same partitions (created beforehand). Afterwards each
  restored topic must hold exactly the source's records per partition: watermarks 0..end for preserve; for renumber
  every committed record read back, its `mirror-v3.source-offset` header covering 0..end-1 once each.
- The disaster-recovery restore (`restore-renumber-dr`): renumber again, but as docs/disaster-recovery.md does it, into
  a topic that does not exist (`--create-topics`: made from the archived topic metadata), `--as-of` the moment the
  archive was finished, and with `group-positions`: the archive keeps the positions of GROUPS (committed on the
  source before it was archived, `destination.archive-groups`), and each is committed on the destination,
  translated, once the records are in; checked afterwards like renumber, and each group's committed offset must be
  the destination offset of the record carrying its source position.

Each command is reported with its wall time (process start to exit: Python and Spark start-up included) and its
work time. Where the work begins is not in the commands' logs; the moments come from a Spark event log the bench
turns on with `spark.conf` (`spark.eventLog.*`, in the mirror's config and so verify's, and in the restore configs),
which gives every command's Spark jobs by kind (restore: `restore.survey`, `restore.produce`; verify: `verify`) and when
each was submitted and ended:
- restore: from its first produce job's submission to its `restore finished` line. That line's own `seconds=` (kept
  as `logged_seconds`) time the whole produce loop, opening the destination partitions included.
- verify logs no duration: its Spark job, first submitted to last ended (the listing and source queries before it
  are not included).
CPU per record is the command's process tree (Python, the Spark JVM and its Python workers) over its work time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no type information in the package
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench import raw
from bench.mirror import LOG_ENV, Context, finish, flushes, start, wait_for, wait_landed
from bench.procs import Sampler
from bench.scenarios import Scenario
from core.kafka_records import parse_source_offset
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    KafkaDataError,
    commit_offset,
    committed_offset,
    create_topic,
    delete_topic,
    record_at,
    watermarks,
)
from testkit.mirror_run import REPO, MirrorRun, MirrorRunError, cli_env, log_time
from testkit.targets import FilesystemTarget, KafkaTarget, chain, verify_offsets

MODES = ("preserve", "renumber")
DR = "renumber-dr"  # renumber with --create-topics, --as-of and group-positions
GROUPS = ("bench-billing", "bench-audit", "bench-search")  # committed at 1/4, 1/2 and 3/4 of every partition
EVENTS = "spark-events"  # in the scenario's log directory: one Spark event log per command


class Command(MirrorRun):
    """`python -m supervisor <command> --config <config> [args]` in the background with the bench's log settings:
    its log (stderr) in `<logs>/<label>.log`, read as MirrorRun reads it, and its stdout in `<logs>/<label>.out`."""

    def __init__(
        self, command: str, config: Path, logs: Path, label: str, *args: str, env: Mapping[str, str] | None = None
    ) -> None:
        self.log_path = logs / f"{label}.log"
        self.out_path = logs / f"{label}.out"
        self.metrics_port = None
        self.started_at = time.time()
        with self.log_path.open("ab") as log, self.out_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor", command, "--config", str(config), *args],
                cwd=REPO,
                env=cli_env({**LOG_ENV, **(env or {})}),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
            )

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")


def event_log_conf(directory: Path) -> dict[str, str]:
    """`spark.conf` keys that make each Spark application write its event log (plain JSON lines) to `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # Spark 4 rolls by default: a directory per application
    }


def spark_jobs(event_log: Path) -> dict[str, Any]:
    """When the application started, and its jobs by kind (the job group without `mirror-v3.` and its unique
    suffix: `verify`, `restore.survey`, `restore.produce`, ...): how many, first submitted and last ended."""
    started: float | None = None
    jobs: dict[int, list[Any]] = {}  # job id -> [kind, submitted, ended]
    with event_log.open() as lines:
        for line in lines:
            if '"SparkListenerApplicationStart"' not in line and '"SparkListenerJob' not in line:
                continue  # stages and tasks: most of the file
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                started = event["Timestamp"] / 1000
            elif kind == "SparkListenerJobStart":
                group = str((event.get("Properties") or {}).get("spark.jobGroup.id") or "other")
                name = group.removeprefix("mirror-v3.").rpartition(".")[0] or group
                jobs[event["Job ID"]] = [name, event["Submission Time"] / 1000, None]
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                jobs[event["Job ID"]][2] = event["Completion Time"] / 1000
    if started is None or not jobs or any(end is None for _, _, end in jobs.values()):
        raise MirrorRunError(f"{event_log}: no application start, or a job that never ended")
    by_kind: dict[str, list[list[Any]]] = defaultdict(list)
    for job in jobs.values():
        by_kind[job[0]].append(job)
    kinds = {
        kind: {"jobs": len(found), "from": min(j[1] for j in found), "to": max(j[2] for j in found)}
        for kind, found in by_kind.items()
    }
    return {"spark_started_at": started, "kinds": kinds}


def timed(
    ctx: Context, label: str, command: str, config: Path, named: Mapping[str, int | None], *args: str
) -> tuple[Command, Sampler, dict[str, Any]]:
    """Run one command to completion (exit 0 required) while psutil samples it; what its Spark event log says."""
    events = ctx.logs / EVENTS
    # An application's log is `<id>.inprogress` until its JVM stops, which may be after the command's process ended.
    known = {name.removesuffix(".inprogress") for name in os.listdir(events)}
    with Command(command, config, ctx.logs, label, *args) as run, Sampler(run.pid, named) as sampler:
        code = run.wait(ctx.timeout)
        ended = time.time()
    if code != 0:
        raise MirrorRunError(f"{command} exited {code}:\n{run.output()[-2000:]}\n{run.tail()}")
    found = [events / name for name in os.listdir(events) if name.removesuffix(".inprogress") not in known]
    if len(found) != 1:
        raise MirrorRunError(f"{command} left {len(found)} Spark event logs in {events}, expected 1")
    spark = spark_jobs(found[0])
    spark["ended_at"] = ended
    return run, sampler, spark


def command_row(run: Command, sampler: Sampler, spark: dict[str, Any], work: tuple[float, float]) -> dict[str, Any]:
    """What every command reports: wall and work seconds (work: the window [from, to]), CPU over each, its jobs."""
    began, ended = run.started_at, spark["ended_at"]
    return {
        "seconds": round(work[1] - work[0], 3),
        "wall_seconds": round(ended - began, 3),
        "before_work_seconds": round(work[0] - began, 3),
        "spark_start_seconds": round(spark["spark_started_at"] - began, 3),
        "spark_jobs": {
            kind: {"jobs": j["jobs"], "seconds": round(j["to"] - j["from"], 3), "at": round(j["from"] - began, 3)}
            for kind, j in spark["kinds"].items()
        },
        "cpu": sampler.cpu_between(*work),
        "cpu_wall": sampler.cpu_between(began, ended),
    }


def archived_records(target: FilesystemTarget, name: str, ends: Mapping[int, int]) -> dict[int, raw.Records]:
    """Every archived record of each partition, in offset order, from the chain's Parquet files (read around
    mirror-v3); each partition must hold offsets 0..end-1."""
    found = {}
    for partition, end in ends.items():
        directory = target.directory(name, partition)
        columns = ["offset", "key", "value", "timestamp", "headers"]
        tables = [pq.read_table(directory / blob.name, columns=columns) for blob in chain(target, name, partition)]
        table = pa.concat_tables(tables).combine_chunks() if tables else None
        if table is None or table.column("offset").to_pylist() != list(range(end)):
            raise KafkaDataError(f"{directory} does not hold offsets 0..{end - 1} in order")
        sizes = pc.list_value_length(table.column("headers"))
        any_headers = bool(pc.max(sizes).as_py() or 0)
        found[partition] = raw.Records(
            keys=table.column("key").to_pylist(),
            values=table.column("value").to_pylist(),
            timestamps=pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist(),
            headers=(
                [[(h["key"], h["value"]) for h in row or []] for row in table.column("headers").to_pylist()]
                if any_headers
                else None
            ),
        )
    return found


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic = ctx.name
    create_topic(ctx.bootstrap, topic, s.partitions)
    ends = dict.fromkeys(range(s.partitions), -(-s.records // s.partitions))
    cell = {"records": sum(ends.values()), "value_size": s.value_size, "partitions": s.partitions}
    yield {**cell, "path": "produce", "seconds": raw.produce_backlog(ctx.bootstrap, topic, ends, s.value_size)}
    yield {**cell, "path": "raw", **raw.consume(ctx.bootstrap, topic, ends, ctx.timeout)}
    positions = {
        group: {p: end * (index + 1) // (len(GROUPS) + 1) for p, end in ends.items()}
        for index, group in enumerate(GROUPS)
    }
    for group, committed in positions.items():
        for partition, offset in committed.items():
            commit_offset(ctx.bootstrap, group, topic, partition, offset)
    archive = FilesystemTarget(ctx.scratch / "archive")
    config, archived = _archive(s, ctx, archive, ends)
    archived_at_ms = int(time.time() * 1000)
    yield {**cell, "path": "archive", **archived, "blobs": _blobs(archive, topic, ends)}
    archives = [("", config)]
    if s.compacted:  # the same archive, compacted: a copy (times kept), merged by the real command
        compacted = FilesystemTarget(ctx.scratch / "compacted")
        shutil.copytree(archive.root, compacted.root)
        copied = yaml.safe_load(config.read_text())
        copied["destination"]["root"] = str(compacted.root)
        copied["destination"]["compaction"] = {"min-age-ms": 0, "window-ms": 0}
        archives.append(("-compacted", ctx.logs / "compacted.yaml"))
        archives[-1][1].write_text(yaml.safe_dump(copied, sort_keys=False))
        row = _compact(ctx, archives[-1][1], {"source broker": ctx.broker_pid})
        yield {**cell, "path": "compact", **row, "blobs": _blobs(compacted, topic, ends)}
    for suffix, archived_config in archives:
        yield {**cell, "path": f"verify{suffix}", **_verify(ctx, archived_config, cell["records"], f"verify{suffix}")}
    delete_topic(ctx.bootstrap, topic)  # the restores read only the archive
    with KafkaBroker() as destination:
        named = {"destination broker": destination.pid}
        records = archived_records(archive, topic, ends)
        create_topic(destination.bootstrap, f"{topic}.raw", s.partitions)
        broker_cpu = _cpu(destination.pid)
        produced = raw.produce_records(destination.bootstrap, f"{topic}.raw", records)
        produced["broker_cpu_seconds"] = round(_cpu(destination.pid) - broker_cpu, 3)
        del records
        _check_watermarks(destination.bootstrap, f"{topic}.raw", ends)
        delete_topic(destination.bootstrap, f"{topic}.raw")  # each restore finds the broker as the raw produce did
        yield {**cell, "path": "raw-produce", **produced}
        runs = [(mode, "", config) for mode in (*MODES, DR)]
        runs += [(mode, suffix, path) for suffix, path in archives[1:] for mode in MODES]
        for mode, suffix, archived_config in runs:
            restored = f"{topic}.{mode}{suffix}"
            offsets_mode = "renumber" if mode == DR else mode
            archive_block = {k: v for k, v in yaml.safe_load(archived_config.read_text())["destination"].items()}
            archive_block.pop("archive-groups", None)  # a mirror's setting, not the archive's
            document: dict[str, Any] = {
                "archive": archive_block,
                "restore": [{"topic": topic, "rename": restored}],
                "destination": {"type": "kafka", "bootstrap-servers": destination.bootstrap, "offsets": offsets_mode},
                "spark": _spark(ctx),
            }
            args: tuple[str, ...] = ()
            if mode == DR:
                document["group-positions"] = {"groups": list(GROUPS)}
                args = ("--create-topics", "--as-of", str(archived_at_ms))
            else:
                create_topic(destination.bootstrap, restored, s.partitions)
            archive_block.pop("compaction", None)
            path = ctx.logs / f"restore-{mode}{suffix}.yaml"
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            row = _restore(ctx, path, mode, cell["records"], named, *args, label=f"restore-{mode}{suffix}")
            began = time.monotonic()
            if mode == "preserve":
                _check_watermarks(destination.bootstrap, restored, ends)
            else:
                verify_offsets(KafkaTarget(destination.bootstrap, offsets_mode), restored, ends)
            if mode == DR:
                _check_positions(destination.bootstrap, restored, positions)
                row["groups"] = len(GROUPS)
            yield {
                **cell,
                "path": f"restore-{mode}{suffix}",
                **row,
                "check_seconds": round(time.monotonic() - began, 2),
            }
            delete_topic(destination.bootstrap, restored)


def _check_positions(bootstrap: str, topic: str, positions: Mapping[str, Mapping[int, int]]) -> None:
    """Each group's committed offset is the destination offset of the record carrying its source position."""
    for group, offsets in positions.items():
        for partition, source_offset in offsets.items():
            committed = committed_offset(bootstrap, group, topic, partition)
            found = None if committed is None else record_at(bootstrap, topic, partition, committed)
            mapped = None if found is None else parse_source_offset(found.headers)
            if mapped != source_offset:
                raise KafkaDataError(
                    f"group {group} on {topic}[{partition}]: committed {committed}, whose record carries source offset "
                    f"{mapped}, expected {source_offset}"
                )


def _spark(ctx: Context) -> dict[str, Any]:
    """The scenario's `spark:` block: --spark's keys, with the event log added to their `conf`."""
    conf = {**dict(ctx.spark.get("conf") or {}), **event_log_conf(ctx.logs / EVENTS)}
    return {**ctx.spark, "conf": conf}


def _cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _check_watermarks(bootstrap: str, topic: str, ends: Mapping[int, int]) -> None:
    for partition, end in ends.items():
        if (found := watermarks(bootstrap, topic, partition)) != (0, end):
            raise KafkaDataError(
                f"{topic}[{partition}] holds offsets {found[0]}..{found[1] - 1}, expected 0..{end - 1}"
            )


def _archive(s: Scenario, ctx: Context, target: FilesystemTarget, ends: dict[int, int]) -> tuple[Path, dict[str, Any]]:
    """The real mirror CLI copying the backlog into the archive directory (as throughput's filesystem path, timed
    the same way); its config file, and what it did."""
    topic = ctx.name
    mirrors = [{"topic": topic, "partition": p} for p in ends]
    extra: dict[str, Any] = {"archive-groups": {"groups": list(GROUPS)}}  # read when the mirrors start and at drain
    if s.blob_offsets:
        extra["flush"] = {**target.config({"max-time-ms": s.max_time_ms})["flush"], "max-offsets": s.blob_offsets}
    run = start(ctx, "archive", target, mirrors, s.max_time_ms, _spark(ctx), extra)
    with run, Sampler(run.pid, {"source broker": ctx.broker_pid}) as sampler:
        ready = log_time(wait_for(run, "spark session ready", ctx.timeout)[0])
        wait_landed(run, target, topic, ends, ctx.timeout)
        sampler.sample()
        began = max([ready, *(log_time(f) for f in run.events("mirror starting"))])
        written = flushes(run)
        done = written.pop("last_flush_at")
        result = finish(run, target, {topic: ends})
    row = {"seconds": round(done - began, 3), "startup_seconds": round(began - run.started_at, 3)}
    return ctx.logs / "archive.yaml", {**row, "cpu": sampler.cpu_between(began, done), **written, **result}


def _blobs(target: FilesystemTarget, name: str, ends: Mapping[int, int]) -> int:
    return sum(len(target.names(name, partition)) for partition in ends)


def _compact(ctx: Context, config: Path, named: Mapping[str, int | None]) -> dict[str, Any]:
    """`compact` of the copy (everything merged: min-age 0, no window). Work: its Spark job."""
    run, sampler, spark = timed(ctx, "compact", "compact", config, named)
    job = spark["kinds"].get("compact")
    if job is None:
        raise MirrorRunError(f"compact ran no compact job: {sorted(spark['kinds'])}")
    return {**command_row(run, sampler, spark, (job["from"], job["to"])), "work": "spark job", "stdout": run.output()}


def _verify(ctx: Context, config: Path, records: int, label: str = "verify") -> dict[str, Any]:
    """`verify` on the mirror's config; every record must compare equal. Work: its Spark job."""
    run, sampler, spark = timed(ctx, label, "verify", config, {"source broker": ctx.broker_pid}, "--format", "json")
    # The JSON document is stdout's last `{` line (the Spark JVM shares stdout: keep clear of anything it prints).
    document = json.loads([line for line in run.output().splitlines() if line.startswith("{")][-1])
    equal = sum(row["equal"] or 0 for row in document["mirrors"])
    if not document["ok"] or equal != records:
        raise MirrorRunError(f"verify: ok={document['ok']}, {equal} of {records} records equal")
    job = spark["kinds"].get("verify")
    if job is None:
        raise MirrorRunError(f"verify ran no verify job: {sorted(spark['kinds'])}")
    return {**command_row(run, sampler, spark, (job["from"], job["to"])), "work": "spark job", "equal": equal}


def _restore(
    ctx: Context,
    config: Path,
    mode: str,
    records: int,
    named: Mapping[str, int | None],
    *args: str,
    label: str | None = None,
) -> dict[str, Any]:
    """`restore` into a fresh topic; its `restore finished` line must count every record. Work: from its first
    produce job to that line. The line's own `seconds=` (kept as `logged_seconds`) start before the first job,
    which in renumber mode is the one that starts Spark: the session's start-up would count as restore time."""
    run, sampler, spark = timed(ctx, label or f"restore-{mode}", "restore", config, named, *args)
    (finished,) = run.events("restore finished")
    if int(finished["records"]) != records:
        raise MirrorRunError(f"restore {mode}: {finished['records']} records restored, expected {records}")
    produce = spark["kinds"].get("restore.produce")
    if produce is None:
        raise MirrorRunError(f"restore {mode} ran no produce job: {sorted(spark['kinds'])}")
    # The DR restore's group positions are committed after `restore finished`: they end its work window.
    restored = run.events("group position restored")
    work_end = max([log_time(finished), *(log_time(line) for line in restored)])
    row = command_row(run, sampler, spark, (produce["from"], work_end))
    return {
        **row,
        "work": "produce jobs",
        "logged_seconds": float(finished["seconds"]),
        "logged_mb": float(finished["mb"]),
        "stdout": run.output().strip().splitlines()[-1],
    }
