"""`python -m bench`: raw confluent-kafka vs mirror-v3 backlog throughput on a local broker.

One run produces one backlog, times the raw consumer over it, then the mirror CLI copying it into each
destination of `--paths` in turn: a directory (filesystem), a fresh bucket on a moto S3 server that this module
starts (s3), and the same topic on a second broker of its own, per Kafka mode (kafka-preserve, kafka-renumber). With a
Kafka path, a raw confluent-kafka consume -> produce copy to another fresh broker is timed too.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.data import produce_backlog
from bench.machine import describe_machine, load_average
from bench.mirror_run import MirrorResult, MirrorRunError, MirrorSettings, run_mirror, write_config
from bench.raw import CopyResult, consume_backlog, consume_produce_backlog
from bench.report import PATH_TITLES, PathRun, Run, console_table, markdown, path_facts, side_facts
from bench.targets import FilesystemTarget, InMemoryMotoServer, KafkaTarget, S3Target, Target, moto_version
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import KafkaDataError, create_topic
from testkit.s3_servers import S3ServerError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = Path("docs/benchmarks.md")
QUICK_RECORDS = 20_000
TOPIC = "bench"
PATHS = ("filesystem", "s3", "kafka-preserve", "kafka-renumber")
S3_PREFIX = "bench"


def parse_paths(text: str) -> list[str]:
    """`filesystem,s3` -> ["filesystem", "s3"]: known names, each once, in the order given."""
    paths: list[str] = []
    for name in (part.strip() for part in text.split(",")):
        if name not in PATHS:
            raise argparse.ArgumentTypeError(f"unknown path {name!r}; choose from {', '.join(PATHS)}")
        if name not in paths:
            paths.append(name)
    return paths


def build_parser() -> argparse.ArgumentParser:
    defaults = MirrorSettings()
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Produce a backlog to a local broker, then time draining it with a raw confluent-kafka consumer "
        "and with the mirror-v3 CLI into each destination of --paths (Kafka -> Parquet files, Kafka -> Parquet "
        "objects on a local moto S3 server); print a table and write docs/benchmarks.md.",
    )
    parser.add_argument(
        "--paths",
        type=parse_paths,
        default=list(PATHS),
        metavar="PATH[,PATH]",
        help=f"destinations to mirror into, in this order: {', '.join(PATHS)} (default all)",
    )
    parser.add_argument("--records", type=int, help="records per partition (default 1000000; --quick: 20000)")
    parser.add_argument("--value-size", type=int, default=1024, help="value bytes per record (default 1024)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partitions, each with --records records and its own mirror (default 1)",
    )
    parser.add_argument(
        "--output", type=Path, help=f"markdown report (default {DEFAULT_OUTPUT}; --quick writes none unless given)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20000 records, 1 s flush max-time, no document"
    )
    mirror = parser.add_argument_group("mirror config (defaults: config/model.py)")
    mirror.add_argument("--flush-max-time-ms", type=int, help=f"default {defaults.flush_max_time_ms}; --quick: 1000")
    mirror.add_argument("--flush-max-bytes", type=int, default=defaults.flush_max_bytes)
    mirror.add_argument("--flush-max-offsets", type=int, default=defaults.flush_max_offsets)
    mirror.add_argument(
        "--compression", default=defaults.compression, choices=["zstd", "snappy", "gzip", "lz4", "none"]
    )
    mirror.add_argument("--max-offsets-per-read", type=int, default=defaults.max_offsets_per_read)
    mirror.add_argument("--offsets-per-task", type=int, default=defaults.offsets_per_task)
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
        help="keep each mirror's config, log and Spark event log, the files and moto's log here, one directory per "
        "path (default: a temp dir); S3 objects live in moto's RAM and go with it",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    records = args.records if args.records is not None else (QUICK_RECORDS if args.quick else 1_000_000)
    output: Path | None = args.output if args.output is not None or args.quick else DEFAULT_OUTPUT
    if records < 1 or args.value_size < 0 or args.partitions < 1:
        parser.error("--records and --partitions must be >= 1, --value-size >= 0")
    paths: list[str] = args.paths
    if not paths:
        parser.error("--paths: name at least one of " + ", ".join(PATHS))
    if "s3" in paths and (reason := InMemoryMotoServer.skip_reason()) is not None:
        parser.error(f"--paths s3: {reason}")
    spark_conf: dict[str, str] = {}
    for entry in args.spark_conf:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            parser.error(f"--spark-conf {entry!r}: expected KEY=VALUE")
        spark_conf[key] = value
    flush_max_time = args.flush_max_time_ms or (1000 if args.quick else MirrorSettings().flush_max_time_ms)
    settings = MirrorSettings(
        flush_max_time_ms=flush_max_time,
        flush_max_bytes=args.flush_max_bytes,
        flush_max_offsets=args.flush_max_offsets,
        compression=args.compression,
        max_offsets_per_read=args.max_offsets_per_read,
        offsets_per_task=args.offsets_per_task,
        spark_conf=spark_conf,
        spark_log_level=args.spark_log_level,
        s3_multipart_threshold_bytes=args.s3_multipart_threshold_bytes,
        s3_part_size_bytes=args.s3_part_size_bytes,
        kafka_compression=args.kafka_compression,
    )
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        run = measure(command, records, args.value_size, args.partitions, settings, args.timeout, paths, args.workdir)
    except (MirrorRunError, KafkaDataError, S3ServerError, TimeoutError) as exc:
        _say(f"FAILED: {exc}")
        return 1

    print(console_table(run))
    for fact in side_facts(run):
        print(f"  {fact}")
    for path_run in run.paths:
        print(f"{PATH_TITLES[path_run.kind]}:")
        for fact in path_facts(run, path_run):
            print(f"  {fact}")
    if output is not None:
        document = output if output.is_absolute() else Path.cwd() / output
        document.parent.mkdir(parents=True, exist_ok=True)
        document.write_text(markdown(run))
        print(f"wrote {document}")
    return 0


def measure(
    command: str,
    records: int,
    value_size: int,
    partitions: int,
    settings: MirrorSettings,
    timeout: float,
    paths: list[str],
    keep: Path | None = None,
) -> Run:
    started = time.time()
    machine = describe_machine()
    load_before = load_average()
    _say(f"load average {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}; starting a broker")
    with tempfile.TemporaryDirectory(prefix="mirror-v3-bench-") as scratch, KafkaBroker() as broker:
        workdir = Path(scratch) if keep is None else keep.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            raise SystemExit(f"bench: --workdir {workdir} is not empty")
        create_topic(broker.bootstrap, TOPIC, partitions)
        total = records * partitions
        _say(f"broker {broker.bootstrap}; producing {partitions} x {records:,} records of {value_size} B")
        produced = produce_backlog(broker.bootstrap, TOPIC, partitions, records, value_size)
        _say(f"produced in {produced.seconds:.2f} s ({total / produced.seconds:,.0f} records/s)")
        ends = dict.fromkeys(range(partitions), records)

        raw = consume_backlog(broker.bootstrap, TOPIC, ends, timeout=timeout)
        _say(f"raw consume: {raw.seconds:.2f} s ({raw.records / raw.seconds:,.0f} records/s)")
        raw_copy: CopyResult | None = None
        if any(kind.startswith("kafka-") for kind in paths):
            with KafkaBroker() as copy_broker:
                create_topic(copy_broker.bootstrap, TOPIC, partitions)
                raw_copy = consume_produce_backlog(
                    broker.bootstrap,
                    copy_broker.bootstrap,
                    TOPIC,
                    ends,
                    compression=settings.kafka_compression,
                    timeout=timeout,
                )
            _say(
                f"raw consume -> produce: {raw_copy.seconds:.2f} s "
                f"({raw_copy.records / raw_copy.seconds:,.0f} records/s)"
            )

        results: list[PathRun] = []
        for kind in paths:
            pathdir = workdir / kind
            pathdir.mkdir()
            if kind == "filesystem":
                target = FilesystemTarget(pathdir / "destination", TOPIC)
                mirror = _mirror(target, pathdir, broker.bootstrap, settings, ends, timeout)
                results.append(PathRun(kind=kind, mirror=mirror))
                continue
            if kind.startswith("kafka-"):
                # A destination broker of its own per mode (started before the timing), like moto for S3.
                _say("starting a destination broker")
                with KafkaBroker() as destination_broker:
                    create_topic(destination_broker.bootstrap, TOPIC, partitions)
                    kafka_target = KafkaTarget(
                        destination_broker.bootstrap, kind.removeprefix("kafka-"), TOPIC, settings.kafka_compression
                    )
                    try:
                        mirror = _mirror(kafka_target, pathdir, broker.bootstrap, settings, ends, timeout)
                    finally:
                        kafka_target.close()
                results.append(PathRun(kind=kind, mirror=mirror))
                continue
            # s3: a moto server of its own (idle while the other paths ran), a fresh bucket, gone afterwards.
            _say(f"starting moto {moto_version()}")
            server = InMemoryMotoServer(pathdir / "moto" if keep is not None else None)
            with server:
                bucket = f"mirror-v3-bench-{uuid.uuid4().hex[:12]}"
                server.create_bucket(bucket)
                s3_target = S3Target(server, bucket, S3_PREFIX, TOPIC)
                try:
                    mirror = _mirror(s3_target, pathdir, broker.bootstrap, settings, ends, timeout)
                finally:
                    s3_target.close()
                results.append(
                    PathRun(
                        kind=kind,
                        mirror=mirror,
                        server_startup_seconds=server.startup_seconds,
                    )
                )
    return Run(
        command=command,
        started=started,
        records_per_partition=records,
        partitions=partitions,
        value_size=value_size,
        topic=TOPIC,
        settings=settings,
        machine=machine,
        load_before=load_before,
        load_after=load_average(),
        produced=produced,
        raw=raw,
        raw_copy=raw_copy,
        paths=results,
        moto=moto_version(),
    )


def _mirror(
    target: Target,
    pathdir: Path,
    bootstrap: str,
    settings: MirrorSettings,
    ends: dict[int, int],
    timeout: float,
) -> MirrorResult:
    """One mirror process copying the backlog into `target`; its config, log and event log under `pathdir`."""
    config = write_config(
        pathdir / "mirror.yaml",
        bootstrap=bootstrap,
        target=target,
        topic=TOPIC,
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
    )
    _say(
        f"mirror -> {target.kind}: start-up {mirror.startup_seconds:.2f} s, backlog {mirror.backlog_seconds:.2f} s "
        f"({mirror.records / mirror.backlog_seconds:,.0f} records/s), exit {mirror.exit_code}, output verified"
    )
    return mirror


def _say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)
