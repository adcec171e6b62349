"""Command line: `python -m supervisor {validate,run,status} --config FILE`.

stdout carries only command output; every log line goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from config import ConfigError, load_config
from config.model import Config
from supervisor import early_signals
from supervisor.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from supervisor.logs import setup_logging

log = logging.getLogger("mirror_v3.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m supervisor", description="Exactly-once Kafka partition mirror.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser("validate", help="check a config file and exit")
    validate.add_argument("--config", required=True, help="path to the YAML config")
    run = commands.add_parser("run", help="run every configured mirror until signalled or failed")
    run.add_argument("--config", required=True, help="path to the YAML config")
    status = commands.add_parser("status", help="show source and destination offsets and the lag per mirror")
    status.add_argument("--config", required=True, help="path to the YAML config")
    status.add_argument("--format", choices=["table", "json"], default="table")
    status.add_argument("--timeout", type=float, default=15.0, help="seconds allowed per query (default 15)")
    status.add_argument(
        "--deep", action="store_true", help="validate every blob name of each chain, not just its tail (slower)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "run":
        early_signals.release()  # only `run` drains; the other commands stop as any program does
    setup_logging()
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"invalid config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "validate":
        count = len(config.mirrors)
        kind = config.destination.__struct_config__.tag
        print(f"{args.config}: valid ({count} mirror{'s' if count != 1 else ''}, destination {kind})")
        return EXIT_OK
    if args.command == "status":
        return _status(config, args.format, args.timeout, args.deep)
    return _run(config)


def _status(config: Config, fmt: str, timeout: float, deep: bool) -> int:
    from supervisor.status import collect_status, render_json, render_table

    report = anyio.run(collect_status, config, timeout, deep)
    print(render_json(report) if fmt == "json" else render_table(report))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _run(config: Config) -> int:
    # A SIGTERM that arrives while the process is still starting must drain like any other: remembered
    # (from `__main__` on, or from here when called directly) until the supervisor's handling takes over.
    early_signals.install()
    from supervisor.app import Supervisor
    from supervisor.metrics import MetricFamilies

    families = MetricFamilies()
    supervisor = Supervisor(config, families, early_signals=early_signals.received)
    try:
        return anyio.run(supervisor.run)
    except KeyboardInterrupt:
        return EXIT_FAILURE
