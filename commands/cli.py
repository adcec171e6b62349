"""Command line: `python -m supervisor <command> --config FILE`; `--help` lists the commands.

stdout carries only command output; every log line goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio
import msgspec
import msgspec.structs

from commands.config_files import load_config
from commands.init_config import DEFAULT_TOPICS
from config import ConfigError
from config.errors import ConfigErrors
from config.estate import Shard
from config.model import Config
from config.restore import RestoreConfig
from config.runtime import RuntimeSettings, parse_runtime
from core import early_signals
from core.errors import EXIT_FAILURE, EXIT_OK, MirrorV3Error, cli_line
from core.logs import command_error, setup_logging
from core.version import installed_version
from workers import spark_daemon
from workers.spark_session import SparkLaunch


class _Report(Protocol):
    @property
    def ok(self) -> bool: ...


R = TypeVar("R", bound=_Report)

if TYPE_CHECKING:
    from commands.status_view import StatusFilter

log = logging.getLogger("mirror_v3.cli")


SHARD_ENV = "MIRROR_V3_SHARD"


def build_parser() -> argparse.ArgumentParser:
    called = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    parser = argparse.ArgumentParser(
        prog="mirror-v3" if called == "mirror-v3" else "python -m supervisor",
        description="Exactly-once Kafka partition mirror.",
    )
    version = installed_version("mirror-v3") or "unknown (not installed)"  # a checkout run as is
    parser.add_argument("--version", action="version", version=f"mirror-v3 {version}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shard_help = (
        f"I/N: this process mirrors only the partitions of shard I of N (0-based; default: ${SHARD_ENV}, else all)"
    )
    init = commands.add_parser(
        "init", help="write a commented starting config from a bootstrap address, a destination and a topic selection"
    )
    init.add_argument("--bootstrap-servers", required=True, help="the source cluster: host:port[,host:port]")
    init.add_argument(
        "--destination", required=True, help="a directory, s3://bucket/prefix, or kafka://host:port (another cluster)"
    )
    init.add_argument(
        "--topics",
        metavar="REGEX",
        default=DEFAULT_TOPICS,
        help=f"whole topic names to mirror (default {DEFAULT_TOPICS!r})",
    )
    init.add_argument(
        "--output", "-o", default="mirror-v3.yaml", help="where to write it (default mirror-v3.yaml; - for stdout)"
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    validate = commands.add_parser("validate", help="check a config file and exit (offline)")
    validate.add_argument("--config", required=True, help="path to the YAML config")
    plan = commands.add_parser(
        "plan", help="connect to the source clusters and list every partition the config would mirror"
    )
    plan.add_argument("--config", required=True, help="path to the YAML config")
    plan.add_argument("--format", choices=["table", "json"], default="table")
    plan.add_argument("--shard", help=shard_help + "; shows each partition's owner")
    plan.add_argument("--timeout", type=float, default=15.0, help="seconds allowed for the metadata (default 15)")
    run = commands.add_parser("run", help="run every configured mirror until signalled or failed")
    run.add_argument("--config", required=True, help="path to the YAML config")
    run.add_argument("--shard", help=shard_help)
    run.add_argument(
        "--standby",
        action="store_true",
        help="wait while another process holds the destination's leases, and take over when it stops or dies",
    )
    status = commands.add_parser("status", help="show source and destination offsets and the lag per mirror")
    status.add_argument("--config", required=True, help="path to the YAML config")
    status.add_argument("--format", choices=["table", "json"], default="table")
    status.add_argument(
        "--timeout",
        type=float,
        default=15.0,
        help="seconds the whole command may take (default 15; each round with --watch): reading the clusters' "
        "topics, every mirror's queries, the process's, closing the clients; what has not answered by then is "
        "named as not answered in time",
    )
    status.add_argument("--shard", help="I/N: add the column of the shard that owns each partition")
    status.add_argument(
        "--process",
        default="local",
        help="base URL of the running process whose /mirrors gives each mirror's state; 'local' (default): "
        "http://127.0.0.1:$MIRROR_V3_METRICS_PORT; 'none': do not ask",
    )
    status.add_argument(
        "--deep",
        action="store_true",
        help="validate every blob name of each chain, not just its tail (slower: the destinations may take ten "
        "times --timeout)",
    )
    status.add_argument("--wide", action="store_true", help="every column (the default table fits 100 columns)")
    status.add_argument("--cluster", help="only the mirrors of this source cluster")
    status.add_argument("--topic", metavar="REGEX", help="only topics this regular expression matches whole")
    status.add_argument("--lagging", action="store_true", help="only mirrors whose lag is above 0")
    status.add_argument(
        "--failed", action="store_true", help="only failed, restarting or data-lost mirrors and rows with an error"
    )
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=5.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 5) with each mirror's rate and ETA, until interrupted; with --format "
        "json, one document per line",
    )
    verify = commands.add_parser(
        "verify",
        help="compare every mirror's destination with its source, record by record (a Spark job); with a restore "
        "config, the restored topics, partitions and group positions with the archive",
    )
    verify.add_argument("--config", required=True, help="path to the YAML config (a mirror or a restore config)")
    verify.add_argument("--format", choices=["table", "json"], default="table")
    verify.add_argument("--shard", help="I/N: only the partitions of shard I of N")
    verify.add_argument("--mirrors", help="a regex: only the mirrors whose name it matches in full")
    verify.add_argument(
        "--max-differences", type=int, default=20, help="differences listed per mirror, the first by offset (20)"
    )
    verify.add_argument("--timeout", type=float, default=30.0, help="seconds allowed per metadata query (default 30)")
    verify.add_argument(
        "--ignore-unmapped",
        action="store_true",
        help="Kafka renumber: destination records without a mirror-v3.source-offset header (written there by "
        "producers of the destination, as with two-way mirrors) are not counted as extra",
    )
    verify.add_argument(
        "--as-of",
        metavar="TIME",
        help="a restore config: verify the restore as of TIME (as `restore --as-of`; overrides the config's as-of)",
    )
    migrate = commands.add_parser(
        "migrate-schemas",
        help="copy the subjects of the entries with `schemas` to the destination's schema registry (before a cutover)",
    )
    migrate.add_argument("--config", required=True, help="path to the YAML config")
    migrate.add_argument("--dry-run", action="store_true", help="print what would be registered and set; write nothing")
    migrate.add_argument(
        "--subjects", metavar="REGEX", help="also these source subjects (by name: record and topic-record strategies)"
    )
    restore = commands.add_parser(
        "restore", help="produce archived chains (filesystem or S3) back into Kafka topics, exactly once"
    )
    restore.add_argument("--config", required=True, help="path to the restore YAML config (archive, restore, ...)")
    restore.add_argument(
        "--dry-run",
        action="store_true",
        help="make every check of the real run, read-only; print the partitions, ranges, records and holes, and "
        "write nothing",
    )
    restore.add_argument(
        "--as-of",
        metavar="TIME",
        help="restore the archive as it was at TIME (milliseconds since the epoch, or RFC 3339 with a zone): each "
        "chain up to its last blob committed by then, the topic metadata and group positions of then",
    )
    restore.add_argument(
        "--create-topics",
        action="store_true",
        help="create missing destination topics as the archive saw their sources (partition count and the "
        "destination's topic-configs); the same as destination.create-topics: true",
    )
    table_sync = commands.add_parser(
        "table-sync",
        help="add to the archive's tables (destination.table) every blob their chains hold that they lack: an archive "
        "written before its table was configured joins it; resumable, and a second run adds nothing",
    )
    table_sync.add_argument("--config", required=True, help="path to the YAML config")
    table_sync.add_argument("--shard", help="I/N: only the chains of shard I of N")
    table_sync.add_argument(
        "--timeout", type=float, default=30.0, help="seconds allowed for the source clusters' topics (default 30)"
    )
    compact = commands.add_parser(
        "compact",
        help="merge each chain's runs of small blobs into bigger ones (destination.compaction), exactly as readable "
        "before, during and after; takes the chains' leases while it runs",
    )
    compact.add_argument("--config", required=True, help="path to the YAML config")
    compact.add_argument("--dry-run", action="store_true", help="print what would be merged; change nothing")
    prune = commands.add_parser(
        "prune",
        help="remove each chain's oldest blobs committed before a cut, and the documents no later moment reads; "
        "restore --as-of then serves the cut and later; takes the chains' leases while it runs",
    )
    prune.add_argument("--config", required=True, help="path to the YAML config")
    cut = prune.add_mutually_exclusive_group(required=True)
    cut.add_argument("--older-than", metavar="AGE", help="keep what was committed within AGE (e.g. 30d, 12h)")
    cut.add_argument("--before", metavar="TIME", help="keep what was committed at or after TIME (RFC 3339 or ms)")
    prune.add_argument("--dry-run", action="store_true", help="print what would go and what stays; change nothing")
    commands.add_parser(
        "prepare-jvm",
        help="record the Spark JVM's classes into $MIRROR_V3_JVM_CACHE once, so every later start maps them "
        "(about half the JVM's start-up CPU)",
    )
    return parser


def _shard(flag: str | None, from_env: str | None) -> Shard | None:
    """--shard, else $MIRROR_V3_SHARD (a StatefulSet passes its pod's ordinal this way), else none."""
    if flag is not None:
        return Shard.parse(flag, "--shard")
    return Shard.parse(from_env, SHARD_ENV) if from_env else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "run":
        early_signals.release()  # only `run` drains; the other commands stop as any program does
    try:
        runtime = parse_runtime(os.environ)
    except ConfigError as exc:
        # The environment is wrong (another variable, or LOG_FORMAT itself): asked for JSON, the line is JSON.
        setup_logging("INFO", "json" if os.environ.get("LOG_FORMAT", "").strip().lower() == "json" else "kv")
        return _report(exc, args.command)
    setup_logging(runtime.log_level, runtime.log_format)
    if args.command == "init":
        return _init(args)
    class_cache = None if runtime.jvm_cache is None else Path(runtime.jvm_cache).expanduser()
    if args.command == "prepare-jvm":
        return _prepare_jvm(class_cache)
    # How every command that starts Spark starts it: the class archive mapped, the workers' daemon ours.
    launch = SparkLaunch(class_cache=class_cache, python_daemon=spark_daemon.__name__)
    if args.command == "restore":  # a config of its own
        return _restore(args, runtime, launch)
    if args.command == "verify" and _is_restore_config(args.config):
        return _verify_restore(args, launch)
    if args.command == "validate" and _is_restore_config(args.config):
        return _validate_restore(args.config)
    try:
        config = load_config(args.config)
        shard = _shard(getattr(args, "shard", None), runtime.shard)
    except ConfigError as exc:
        return _report(exc, args.command)
    if args.command == "validate":
        enabled = [m for m in config.mirrors if m.enabled]
        singles = sum(1 for m in enabled if not m.is_selection)
        selections, disabled = len(enabled) - singles, len(config.mirrors) - len(enabled)
        kind = config.destination.__struct_config__.tag
        counts = [f"{singles} mirror{'s' if singles != 1 else ''}"] if singles or not selections else []
        if selections:
            counts.append(f"{selections} selection{'s' if selections != 1 else ''}")
        if disabled:
            counts.append(f"{disabled} disabled")
        print(f"{args.config}: valid ({', '.join(counts)}, destination {kind})")
        return EXIT_OK
    if args.command == "plan":
        return _plan(config, args.format, args.timeout, shard)
    if args.command == "status":
        if args.timeout <= 0:
            return _report(ConfigError("--timeout", "must be above 0 seconds"), "status")
        if args.watch is not None:
            return _watch_status(config, args, shard, runtime)
        return _status(config, args, shard, _process_url(args.process, runtime))
    if args.command == "migrate-schemas":
        return _migrate_schemas(config, args)
    if args.command == "table-sync":
        return _table_sync(config, shard, args.timeout)
    if args.command == "compact":
        return _compact(config, launch, args.dry_run)
    if args.command == "prune":
        return _prune(config, args.older_than, args.before, args.dry_run)
    if args.command == "verify":
        if args.as_of is not None:
            return _report(ConfigError("--as-of", "applies to a restore config, not to a mirror config"), "verify")
        return _verify(config, args, shard, launch)
    return _run(config, shard, runtime, launch, args.standby)


def _init(args: argparse.Namespace) -> int:
    """`init`: the starting config, written where asked (never over a file without --force), and what to run next."""
    from commands.init_config import Destination, starting_config

    try:
        text = starting_config(args.bootstrap_servers, Destination.parse(args.destination), args.topics)
        if args.output == "-":
            print(text, end="")
            return EXIT_OK
        target = Path(args.output)
        if target.exists() and not args.force:
            raise ConfigError(str(target), "exists already: choose another --output, or --force to overwrite it")
        target.write_text(text, encoding="utf-8")
    except ConfigError as exc:
        return _report(exc, "init")
    except OSError as exc:
        return _report(ConfigError(args.output, f"cannot be written: {exc.strerror or exc}"), "init")
    prog = build_parser().prog
    print(f"wrote {target}: a starting config. Next:")
    for step, what in (
        ("validate", "offline: every problem of the file at once"),
        ("plan", "asks the cluster: every partition it would mirror, and where"),
        ("run", "mirrors; /metrics, /healthz and /readyz on port 7780"),
    ):
        print(f"  {prog} {step} --config {target}   # {what}")
    return EXIT_OK


def _prepare_jvm(directory: Path | None) -> int:
    from commands.jvm_cache import prepare_class_archive
    from workers.spark_start import log_jvm_event

    if directory is None:
        return _report(ConfigError("MIRROR_V3_JVM_CACHE", "is off: there is no directory to prepare"), "prepare-jvm")
    try:
        archive, made = prepare_class_archive(directory, log_jvm_event)
    except MirrorV3Error as exc:
        return _report(exc, "prepare-jvm")
    size_mb = archive.stat().st_size / 1e6
    print(f"{archive}: {'recorded' if made else 'present'} ({size_mb:.0f} MB)")
    return EXIT_OK


def _report(exc: MirrorV3Error, command: str) -> int:
    """The command's last word: one stderr line (a JSON event with LOG_FORMAT=json), and the exit code the error
    carries."""
    for each in exc.errors if isinstance(exc, ConfigErrors) else (exc,):  # a file's problems: a line each
        command_error(cli_line(each, command), command=command, error_type=type(each).__name__, exit_code=exc.exit_code)
    return exc.exit_code


def _process_url(process: str, runtime: RuntimeSettings) -> str | None:
    """status --process: 'local' is this host's process on MIRROR_V3_METRICS_PORT, 'none' none, else a URL."""
    from commands.status import default_process

    return {"local": default_process(runtime.metrics_port), "none": None}.get(process, process)


def _verify(config: Config, args: argparse.Namespace, shard: Shard | None, launch: SparkLaunch) -> int:
    from commands.verify import collect_verification, render_json, render_table

    try:
        select = re.compile(args.mirrors) if args.mirrors else None
    except re.error as exc:
        return _report(ConfigError("--mirrors", f"not a regular expression: {exc}"), "verify")
    verification = partial(
        collect_verification,
        config,
        launch,
        shard=shard,
        select=select,
        max_differences=max(0, args.max_differences),
        timeout_s=args.timeout,
        ignore_unmapped=args.ignore_unmapped,
    )
    return _print_verification(verification, render_json if args.format == "json" else render_table)


def _is_restore_config(path: str) -> bool:
    from commands.config_files import is_restore_config

    try:
        return is_restore_config(path)
    except ConfigError:
        return False  # load_config reports it


def _validate_restore(path: str) -> int:
    """`validate` of a restore config (`archive`, `restore`, `destination`): checked as `restore` and `verify` read
    it, nothing reached."""
    from commands.config_files import load_restore_config

    try:
        config = load_restore_config(path)
    except ConfigError as exc:
        return _report(exc, "validate")
    entries = len(config.restore)
    archive = config.archive.__struct_config__.tag
    moment = "" if config.as_of is None else ", as of a moment"
    counted = f"{entries} entr{'y' if entries == 1 else 'ies'}"
    print(f"{path}: valid (restore config: {counted} from the {archive} archive{moment})")
    return EXIT_OK


def _verify_restore(args: argparse.Namespace, launch: SparkLaunch) -> int:
    from commands.restore_verify import render_json, render_table, verify_restore

    for flag, given in (
        ("--shard", args.shard),
        ("--mirrors", args.mirrors),
        ("--ignore-unmapped", args.ignore_unmapped),
    ):
        if given:
            return _report(ConfigError(flag, "applies to a mirror config, not to a restore config"), "verify")
    try:
        config = _restore_config(args)
    except MirrorV3Error as exc:
        return _report(exc, "verify")
    return _print_verification(
        partial(verify_restore, config, launch), render_json if args.format == "json" else render_table
    )


def _print_verification(verification: Callable[[], Awaitable[R]], render: Callable[[R], str]) -> int:
    """Run a verification (it may start Spark, stopped after), print its report; 0 when it found nothing wrong."""
    from workers.spark_session import stop_spark

    try:
        report = anyio.run(verification)
    except MirrorV3Error as exc:
        return _report(exc, "verify")
    finally:
        stop_spark()
    print(render(report))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _restore_config(args: argparse.Namespace) -> RestoreConfig:
    """The restore config of `--config`, with what `--create-topics` and `--as-of` change (ConfigError)."""
    from commands.config_files import load_restore_config
    from config.restore import parse_as_of

    config = load_restore_config(args.config)
    if getattr(args, "create_topics", False):
        config = msgspec.structs.replace(
            config, destination=msgspec.structs.replace(config.destination, create_topics=True)
        )
    if args.as_of is not None:
        config = msgspec.structs.replace(config, as_of=parse_as_of(args.as_of))
    return config


def _restore(args: argparse.Namespace, runtime: RuntimeSettings, launch: SparkLaunch) -> int:
    from commands.restore import run_restore
    from telemetry.metrics import MetricFamilies
    from workers.spark_session import stop_spark

    try:
        config = _restore_config(args)
        families = None if args.dry_run else MetricFamilies()
        restore = partial(
            run_restore, config, launch, dry_run=args.dry_run, families=families, metrics_port=runtime.metrics_port
        )
        print(anyio.run(restore))
    except MirrorV3Error as exc:
        return _report(exc, "restore")
    finally:
        stop_spark()
    return EXIT_OK


def _migrate_schemas(config: Config, args: argparse.Namespace) -> int:
    from commands.migrate_schemas import migrate_schemas

    try:
        subjects = re.compile(args.subjects) if args.subjects else None
    except re.error as exc:
        return _report(ConfigError("--subjects", f"not a regular expression: {exc}"), "migrate-schemas")
    try:
        lines = anyio.run(partial(migrate_schemas, config, dry_run=args.dry_run, subjects=subjects))
    except MirrorV3Error as exc:
        return _report(exc, "migrate-schemas")
    print("\n".join(lines))
    return EXIT_OK


def _table_sync(config: Config, shard: Shard | None, timeout: float) -> int:
    from commands.table_sync import complete, summary, table_sync

    try:
        synced = anyio.run(table_sync, config, shard, timeout)
    except MirrorV3Error as exc:
        return _report(exc, "table-sync")
    print("\n".join(summary(sync) for sync in synced) or "no mirror selects a chain: nothing to sync")
    return EXIT_OK if all(complete(sync) for sync in synced) else EXIT_FAILURE


def _compact(config: Config, launch: SparkLaunch, dry_run: bool) -> int:
    from commands.compact import compact, describe, summary

    try:
        done = anyio.run(compact, config, launch, dry_run, lambda chain: print(describe(chain, dry_run), flush=True))
    except MirrorV3Error as exc:
        return _report(exc, "compact")
    print(summary(done, dry_run))
    return EXIT_FAILURE if any(chain.failed for chain in done) else EXIT_OK


def _prune(config: Config, older_than: str | None, before: str | None, dry_run: bool) -> int:
    from commands.prune import prune, summary
    from config.moments import parse_age, parse_moment

    now_ms = round(time.time() * 1000)
    try:
        cut_ms = now_ms - parse_age(older_than, "--older-than") if older_than else parse_moment(str(before), "--before")
        outcome = anyio.run(prune, config, cut_ms, dry_run, lambda line: print(line, flush=True), now_ms)
    except MirrorV3Error as exc:
        return _report(exc, "prune")
    print(summary(outcome, dry_run))
    return EXIT_FAILURE if outcome.failed else EXIT_OK


def _plan(config: Config, fmt: str, timeout: float, shard: Shard | None) -> int:
    from commands.plan import collect_plan, render_json, render_table

    try:
        plan = anyio.run(collect_plan, config, timeout, shard)
    except MirrorV3Error as exc:
        return _report(exc, "plan")
    print(render_json(plan) if fmt == "json" else render_table(plan))
    return EXIT_OK


def _status_filter(args: argparse.Namespace) -> StatusFilter | ConfigError:
    from commands.status_view import StatusFilter

    if args.topic is not None:
        try:
            re.compile(args.topic)
        except re.error as exc:
            return ConfigError("--topic", f"not a regular expression: {exc}")
    return StatusFilter(args.cluster, args.topic, args.lagging, args.failed)


def _status(config: Config, args: argparse.Namespace, shard: Shard | None, url: str | None) -> int:
    from commands.status import collect_status
    from commands.status_view import render_json, render_table

    shown = _status_filter(args)
    if isinstance(shown, ConfigError):
        return _report(shown, "status")
    try:
        report = shown.apply(anyio.run(collect_status, config, args.timeout, args.deep, shard, url))
    except MirrorV3Error as exc:
        return _report(exc, "status")
    print(render_json(report) if args.format == "json" else render_table(report, args.wide))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _watch_status(config: Config, args: argparse.Namespace, shard: Shard | None, runtime: RuntimeSettings) -> int:
    from commands.status import StatusReport, watch_status
    from commands.status_view import render_json, render_table

    if args.watch <= 0:
        return _report(ConfigError("--watch", "the refresh interval must be above 0 seconds"), "status")
    shown = _status_filter(args)
    if isinstance(shown, ConfigError):
        return _report(shown, "status")
    url = _process_url(args.process, runtime)
    clear = sys.stdout.isatty() and args.format == "table"

    def emit(everything: StatusReport) -> None:
        report = shown.apply(everything)
        if args.format == "json":
            print(render_json(report), flush=True)
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # A terminal shows one table, redrawn; a pipe or file gets each refresh after the previous one.
        print(("\x1b[H\x1b[2J" if clear else "\n") + f"{stamp}  every {args.watch:g}s, Ctrl-C to stop", flush=True)
        print(render_table(report, args.wide), flush=True)

    failures: list[MirrorV3Error] = []

    async def until_signalled() -> None:
        async with anyio.create_task_group() as tasks:

            async def watching() -> None:
                try:
                    await watch_status(config, args.watch, emit, args.timeout, args.deep, shard, url)
                except MirrorV3Error as exc:
                    failures.append(exc)
                tasks.cancel_scope.cancel()

            tasks.start_soon(watching)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    tasks.cancel_scope.cancel()

    anyio.run(until_signalled)
    for failure in failures:
        return _report(failure, "status")
    return EXIT_OK


def _run(
    config: Config, shard: Shard | None, runtime: RuntimeSettings, launch: SparkLaunch, standby: bool = False
) -> int:
    # A SIGTERM that arrives while the process is still starting must drain like any other: remembered
    # (from `__main__` on, or from here when called directly) until the supervisor's handling takes over.
    early_signals.install()
    from supervisor.app import RunProcess
    from telemetry.metrics import MetricFamilies

    families = MetricFamilies()
    process = RunProcess(
        config,
        families,
        early_signals=early_signals.received,
        shard=shard,
        runtime=runtime,
        standby=standby,
        launch=launch,
    )
    try:
        code = anyio.run(process.run)
    except KeyboardInterrupt:
        return EXIT_FAILURE
    if process.spark_abandoned:
        # The thread starting Spark cannot be interrupted, and the interpreter would wait for it (seconds, more on
        # a busy machine) before exiting: end now. The JVM exits when its stdin, a pipe from this process, closes.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
