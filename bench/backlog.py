"""`python -m bench`: every benchmark of mirror-v3 in one run, next to raw Kafka clients measured in the same run.

One source broker is started; then, in this order:

1. backlog throughput, for each cell (record size x partition count): produce the backlog to a topic of its own,
   time the raw baselines over it (a confluent-kafka consume loop, kcat when installed, and for the Kafka paths a
   raw confluent-kafka consume -> produce copy to a fresh broker), then the mirror CLI copying it into each
   destination of `--paths` in turn (a directory; a fresh bucket on a moto S3 server started for it; the same topic
   on a second broker per Kafka mode). The filesystem run of each cell is profiled with py-spy;
2. produce -> durable latency at a steady rate (bench.latency);
3. restart time and LIST calls with 10 000 objects already in the chain (bench.restart);
4. RSS and CPU of 100 and 1 000 idle mirrors in one process (bench.idle).

It prints a summary, and writes docs/benchmarks.md and the chart docs/benchmarks.png.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.chart import write_chart
from bench.data import produce_backlog
from bench.idle import IdleResult, console_idle, measure_idle
from bench.latency import LatencyResult, console_latency, measure_latency
from bench.machine import describe_machine, load_average
from bench.mirror_run import MirrorResult, MirrorRunError, MirrorSettings, run_mirror, write_config
from bench.pyspy import py_spy_binary
from bench.raw import ConsumeResult, CopyResult, consume_backlog, consume_produce_backlog, kcat_binary, kcat_consume
from bench.report import PATH_TITLES, Cell, CellRun, PathRun, Suite, console_table, markdown, path_facts
from bench.restart import RestartResult, console_restart, measure_restart
from bench.targets import FilesystemTarget, InMemoryMotoServer, KafkaTarget, S3Target, Target, moto_version
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import KafkaDataError, create_topic
from testkit.s3_servers import S3ServerError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = Path("docs/benchmarks.md")
PATHS = ("filesystem", "s3", "kafka-preserve", "kafka-renumber")
PARTS = ("throughput", "latency", "restart", "idle")
S3_PREFIX = "bench"
# Records per cell (over all its partitions), by value size: about a gigabyte of 1 KiB records, and enough 100 B
# records for the backlog to take several seconds at the target rate.
DEFAULT_RECORDS = {100: 4_000_000, 1024: 1_000_000}
FALLBACK_RECORDS = 1_000_000
QUICK_RECORDS = 20_000
# The tail of a backlog (less than max-bytes) is written when max-time runs out; with the product's default of 10 s
# that wait would dominate a backlog of a few seconds, so the throughput runs use 1 s (the latency run's value too).
THROUGHPUT_MAX_TIME_MS = 1000


@dataclass(frozen=True)
class Plan:
    cells: list[Cell]
    paths: list[str]
    parts: list[str]
    settings: MirrorSettings
    timeout: float
    profile: bool
    latency_seconds: float
    restart_objects: int
    idle_counts: list[int]


def name_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type: `a,b` -> ["a", "b"], known names only, each once, in the order given."""

    def parse(text: str) -> list[str]:
        names: list[str] = []
        for name in (part.strip() for part in text.split(",")):
            if name not in choices:
                raise argparse.ArgumentTypeError(f"unknown {what} {name!r}; choose from {', '.join(choices)}")
            if name not in names:
                names.append(name)
        return names

    return parse


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    defaults = MirrorSettings()
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Every mirror-v3 benchmark in one run, each next to a raw Kafka client measured in the same run: "
        "backlog throughput of every destination for 100 B and 1 KiB records in 1 and 8 partitions, produce -> "
        "durable latency, restart with 10 000 objects in the chain, idle mirrors' memory. Prints a summary and "
        "writes docs/benchmarks.md and docs/benchmarks.png.",
    )
    parser.add_argument(
        "--only",
        type=name_list(PARTS, "part"),
        default=list(PARTS),
        metavar="PART[,PART]",
        help=f"measure only these: {', '.join(PARTS)} (default all)",
    )
    parser.add_argument(
        "--paths",
        type=name_list(PATHS, "path"),
        default=list(PATHS),
        metavar="PATH[,PATH]",
        help=f"throughput: destinations, in this order: {', '.join(PATHS)} (default all)",
    )
    parser.add_argument(
        "--value-sizes", type=int_list, default=[100, 1024], metavar="N[,N]", help="throughput: value bytes (100,1024)"
    )
    parser.add_argument(
        "--partition-counts", type=int_list, default=[1, 8], metavar="N[,N]", help="throughput: partitions (1,8)"
    )
    parser.add_argument(
        "--records",
        type=int,
        help="throughput: records per cell, over all its partitions (default 4000000 for 100 B values, 1000000 for "
        "1 KiB and any other size; --quick: 20000)",
    )
    parser.add_argument("--no-profile", action="store_true", help="do not run py-spy on the filesystem runs")
    parser.add_argument("--latency-seconds", type=float, help="latency: measured seconds (default 60; --quick: 10)")
    parser.add_argument("--restart-objects", type=int, help="restart: objects in the chain (default 10000)")
    parser.add_argument(
        "--idle-counts", type=int_list, help="idle: mirrors per process, e.g. 100,1000 (default; --quick: 10)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"markdown report; the chart goes beside it (default {DEFAULT_OUTPUT}; --quick writes none unless given)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small backlogs and short scenarios, no document"
    )
    mirror = parser.add_argument_group("mirror config of the throughput runs (defaults: config/model.py)")
    mirror.add_argument(
        "--flush-max-time-ms",
        type=int,
        default=THROUGHPUT_MAX_TIME_MS,
        help=f"default {THROUGHPUT_MAX_TIME_MS}: the backlog's last partial buffer waits this long before its flush",
    )
    mirror.add_argument("--flush-max-bytes", type=int, default=defaults.flush_max_bytes)
    mirror.add_argument("--flush-max-offsets", type=int, default=defaults.flush_max_offsets)
    mirror.add_argument(
        "--compression", default=defaults.compression, choices=["zstd", "snappy", "gzip", "lz4", "none"]
    )
    mirror.add_argument("--max-offsets-per-read", type=int, default=defaults.max_offsets_per_read)
    mirror.add_argument("--max-bytes-per-read", type=int, default=defaults.max_bytes_per_read)
    mirror.add_argument("--offsets-per-task", type=int, default=defaults.offsets_per_task)
    mirror.add_argument("--bytes-per-task", type=int, default=defaults.bytes_per_task)
    mirror.add_argument(
        "--spark-log-level", default=defaults.spark_log_level, choices=["ERROR", "WARN", "INFO", "DEBUG"]
    )
    mirror.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra spark.conf entry (repeatable)"
    )
    mirror.add_argument("--s3-multipart-threshold-bytes", type=int, default=defaults.s3_multipart_threshold_bytes)
    mirror.add_argument("--s3-part-size-bytes", type=int, default=defaults.s3_part_size_bytes)
    mirror.add_argument(
        "--kafka-compression",
        default=defaults.kafka_compression,
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="record-batch compression of the Kafka paths (and of the raw copy's producer)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed for each drain (default 1800)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep every config, log, Spark event log, profile and file here (default: a temp dir)",
    )
    return parser


def plan_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Plan:
    spark_conf: dict[str, str] = {}
    for entry in args.spark_conf:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            parser.error(f"--spark-conf {entry!r}: expected KEY=VALUE")
        spark_conf[key] = value
    if args.records is not None and args.records < 1:
        parser.error("--records must be >= 1")
    if any(count < 1 for count in args.partition_counts):
        parser.error("--partition-counts must be >= 1")
    cells = []
    for value_size in args.value_sizes:
        for partitions in args.partition_counts:
            total = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS.get(value_size, FALLBACK_RECORDS))
            cells.append(
                Cell(value_size=value_size, partitions=partitions, records_per_partition=-(-total // partitions))
            )
    if "throughput" in args.only and "s3" in args.paths and (reason := InMemoryMotoServer.skip_reason()) is not None:
        parser.error(f"--paths s3: {reason}")
    settings = MirrorSettings(
        flush_max_time_ms=args.flush_max_time_ms,
        flush_max_bytes=args.flush_max_bytes,
        flush_max_offsets=args.flush_max_offsets,
        compression=args.compression,
        max_offsets_per_read=args.max_offsets_per_read,
        max_bytes_per_read=args.max_bytes_per_read,
        offsets_per_task=args.offsets_per_task,
        bytes_per_task=args.bytes_per_task,
        spark_conf=spark_conf,
        spark_log_level=args.spark_log_level,
        s3_multipart_threshold_bytes=args.s3_multipart_threshold_bytes,
        s3_part_size_bytes=args.s3_part_size_bytes,
        kafka_compression=args.kafka_compression,
    )
    return Plan(
        cells=cells,
        paths=args.paths,
        parts=args.only,
        settings=settings,
        timeout=args.timeout,
        profile=not args.no_profile and py_spy_binary() is not None,
        latency_seconds=args.latency_seconds or (10.0 if args.quick else 60.0),
        restart_objects=args.restart_objects or (500 if args.quick else 10_000),
        idle_counts=args.idle_counts or ([10] if args.quick else [100, 1000]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    plan = plan_from(args, parser)
    output: Path | None = args.output if args.output is not None or args.quick else DEFAULT_OUTPUT
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        suite = measure(command, plan, args.workdir, quick=args.quick)
    except (MirrorRunError, KafkaDataError, S3ServerError, TimeoutError, RuntimeError) as exc:
        _say(f"FAILED: {exc}")
        return 1
    for cell in suite.cells:
        print(f"== {cell.cell.label}")
        print(console_table(cell))
        for path_run in cell.paths:
            print(f"{PATH_TITLES[path_run.kind]}:")
            for fact in path_facts(cell, path_run, suite.settings, suite.machine.cpus):
                print(f"  {fact}")
    for line in (
        (console_latency(suite.latency) if suite.latency else [])
        + (console_restart(suite.restart) if suite.restart else [])
        + (console_idle(suite.idle) if suite.idle else [])
    ):
        print(line)
    if output is not None:
        document = output if output.is_absolute() else Path.cwd() / output
        document.parent.mkdir(parents=True, exist_ok=True)
        chart = document.with_suffix(".png")
        if suite.cells:
            write_chart(suite, chart)
            print(f"wrote {chart}")
        document.write_text(markdown(suite, chart.name if suite.cells else None))
        print(f"wrote {document}")
    return 0


def measure(command: str, plan: Plan, keep: Path | None, *, quick: bool = False) -> Suite:
    started = time.time()
    machine = describe_machine()
    load_before = load_average()
    _say(f"load average {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}; starting a broker")
    with tempfile.TemporaryDirectory(prefix="mirror-v3-bench-") as scratch:
        workdir = Path(scratch) if keep is None else keep.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            raise SystemExit(f"bench: --workdir {workdir} is not empty")
        with KafkaBroker(workdir / "source-broker") as broker:
            _say(f"source broker {broker.bootstrap}")
            cells: list[CellRun] = []
            if "throughput" in plan.parts:
                for cell in plan.cells:
                    cells.append(measure_cell(broker, cell, plan, workdir / cell.slug))
            latency: LatencyResult | None = None
            if "latency" in plan.parts:
                _say(f"latency: 5,000 records/s for {plan.latency_seconds:.0f} s into the filesystem")
                latency = measure_latency(
                    broker.bootstrap,
                    workdir / "latency",
                    seconds=plan.latency_seconds,
                    warmup_seconds=5.0 if quick else 10.0,
                )
            restart: list[RestartResult] | None = None
            if "restart" in plan.parts:
                _say(f"restart with {plan.restart_objects:,} objects in the chain")
                # One restart per destination: each copies the extra records on a fresh Spark, minutes of waiting.
                restart = measure_restart(broker.bootstrap, workdir / "restart", objects=plan.restart_objects, runs=1)
            idle: list[IdleResult] | None = None
            if "idle" in plan.parts:
                _say(f"idle mirrors: {', '.join(str(n) for n in plan.idle_counts)}")
                window = 5.0 if quick else 30.0
                idle = measure_idle(
                    broker.bootstrap,
                    workdir / "idle",
                    counts=plan.idle_counts,
                    settle_seconds=window,
                    sample_seconds=window,
                    broker_pid=broker.pid,
                )
    return Suite(
        command=command,
        started=started,
        finished=time.time(),
        settings=plan.settings,
        machine=machine,
        load_before=load_before,
        load_after=load_average(),
        cells=cells,
        latency=latency,
        restart=restart,
        idle=idle,
        moto=moto_version(),
    )


def measure_cell(broker: KafkaBroker, cell: Cell, plan: Plan, celldir: Path) -> CellRun:
    settings, timeout = plan.settings, plan.timeout
    celldir.mkdir(parents=True)
    topic = f"bench-{cell.slug}"
    create_topic(broker.bootstrap, topic, cell.partitions)
    _say(f"{cell.label}: producing {cell.partitions} x {cell.records_per_partition:,} records")
    produced = produce_backlog(broker.bootstrap, topic, cell.partitions, cell.records_per_partition, cell.value_size)
    _say(f"produced in {produced.seconds:.2f} s ({produced.records / produced.seconds:,.0f} records/s)")
    ends = dict.fromkeys(range(cell.partitions), cell.records_per_partition)

    raw = consume_backlog(broker.bootstrap, topic, ends, timeout=timeout)
    _say(f"raw consume: {raw.seconds:.2f} s ({raw.records / raw.seconds:,.0f} records/s)")
    kcat: ConsumeResult | None = None
    if (binary := kcat_binary()) is not None:
        kcat = kcat_consume(binary, broker.bootstrap, topic, ends, timeout=timeout)
        _say(f"kcat: {kcat.seconds:.2f} s ({kcat.records / kcat.seconds:,.0f} records/s)")
    raw_copy: CopyResult | None = None
    if any(kind.startswith("kafka-") for kind in plan.paths):
        with KafkaBroker(celldir / "copy-broker") as copy_broker:
            create_topic(copy_broker.bootstrap, topic, cell.partitions)
            raw_copy = consume_produce_backlog(
                broker.bootstrap,
                copy_broker.bootstrap,
                topic,
                ends,
                compression=settings.kafka_compression,
                timeout=timeout,
            )
        _say(f"raw consume -> produce: {raw_copy.seconds:.2f} s ({raw_copy.records / raw_copy.seconds:,.0f} records/s)")

    watch = {"source broker": broker.pid} if broker.pid is not None else {}
    results: list[PathRun] = []
    for kind in plan.paths:
        pathdir = celldir / kind
        pathdir.mkdir()
        if kind == "filesystem":
            target: Target = FilesystemTarget(pathdir / "destination", topic)
            profile = pathdir / "py-spy.txt" if plan.profile else None
            mirror = _mirror(target, pathdir, broker.bootstrap, topic, settings, ends, timeout, watch, profile)
            results.append(PathRun(kind=kind, mirror=mirror))
        elif kind.startswith("kafka-"):
            # A destination broker of its own per mode (started before the timing), like moto for S3.
            _say("starting a destination broker")
            with KafkaBroker(pathdir / "destination-broker") as destination_broker:
                create_topic(destination_broker.bootstrap, topic, cell.partitions)
                kafka_target = KafkaTarget(
                    destination_broker.bootstrap, kind.removeprefix("kafka-"), topic, settings.kafka_compression
                )
                both = dict(watch)
                if destination_broker.pid is not None:
                    both["destination broker"] = destination_broker.pid
                try:
                    mirror = _mirror(kafka_target, pathdir, broker.bootstrap, topic, settings, ends, timeout, both)
                finally:
                    kafka_target.close()
            results.append(PathRun(kind=kind, mirror=mirror))
        else:
            # s3: a moto server of its own (idle while the other paths ran), a fresh bucket, gone afterwards.
            _say(f"starting moto {moto_version()}")
            with InMemoryMotoServer(pathdir / "moto") as server:
                bucket = f"mirror-v3-bench-{uuid.uuid4().hex[:12]}"
                server.create_bucket(bucket)
                s3_target = S3Target(server, bucket, S3_PREFIX, topic)
                both = dict(watch)
                if server.pid is not None:
                    both["moto S3 server"] = server.pid
                try:
                    mirror = _mirror(s3_target, pathdir, broker.bootstrap, topic, settings, ends, timeout, both)
                finally:
                    s3_target.close()
                results.append(PathRun(kind=kind, mirror=mirror, server_startup_seconds=server.startup_seconds))
    return CellRun(cell=cell, topic=topic, produced=produced, raw=raw, kcat=kcat, raw_copy=raw_copy, paths=results)


def _mirror(
    target: Target,
    pathdir: Path,
    bootstrap: str,
    topic: str,
    settings: MirrorSettings,
    ends: dict[int, int],
    timeout: float,
    watch: dict[str, int],
    profile: Path | None = None,
) -> MirrorResult:
    """One mirror process copying the backlog into `target`; its config, log and event log under `pathdir`."""
    config = write_config(
        pathdir / "mirror.yaml",
        bootstrap=bootstrap,
        target=target,
        topic=topic,
        partitions=len(ends),
        settings=settings,
        event_log_dir=pathdir / "spark-events",
    )
    _say(f"running the mirror into {target.describe()} (python -m supervisor run)")
    mirror = run_mirror(
        config,
        target=target,
        ends=ends,
        log_path=pathdir / "mirror.log",
        event_log_dir=pathdir / "spark-events",
        timeout=timeout,
        watch=watch,
        profile=profile,
    )
    _say(
        f"mirror -> {target.kind}: start-up {mirror.startup_seconds:.2f} s, backlog {mirror.backlog_seconds:.2f} s "
        f"({mirror.records / mirror.backlog_seconds:,.0f} records/s), exit {mirror.exit_code}, output verified"
    )
    return mirror


def _say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)
