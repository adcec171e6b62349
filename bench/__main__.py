"""`python -m bench`: the micro benchmarks, the scenario table and the report, in one run.

    python -m bench                          # everything; the report is docs/benchmarks.md
    python -m bench --quick                  # every kind, small; the report stays in WORKDIR
    python -m bench --only estate-steady     # some parts of the table (see --help)
    python -m bench estate-steady --set partitions=64 --set seconds=20   # one row of a kind alone, changed

A run that is not the whole table unchanged (--quick, a KIND, --set, --only, --paths) writes its report into WORKDIR,
not docs/: the page is one run's, whole.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench import report, runner
from bench.scenarios import ALONE, FULL, KINDS, PATHS, QUICK, Scenario, with_settings

DOCUMENT = runner.REPO / "docs" / "benchmarks.md"
PARTS = ("micro", *KINDS)


def names(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type: `a,b` -> ["a", "b"], each one of `choices`."""

    def parse(text: str) -> list[str]:
        found = [part.strip() for part in text.split(",") if part.strip()]
        if not found or any(part not in choices for part in found):
            raise argparse.ArgumentTypeError(f"expected some of {','.join(choices)}, got {text!r}")
        return found

    return parse


def setting(text: str) -> tuple[str, Any]:
    """An argparse type: `key=value` -> (key, the value read as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Micro benchmarks of the hot pure functions, then every end-to-end scenario (backlog throughput "
        "of every destination next to raw Kafka clients, produce -> durable latency, restart with a long chain, idle "
        "mirrors, restore and verify next to a raw produce and consume) against brokers and moto started on "
        "127.0.0.1; one JSON line per measurement in WORKDIR/results.jsonl, rendered as "
        f"{DOCUMENT.relative_to(runner.REPO)} and its chart.",
    )
    p.add_argument(
        "kind",
        nargs="?",
        choices=sorted(ALONE),
        help="run only this kind's one row (bench.scenarios.ALONE), changed by --set; the report stays in WORKDIR",
    )
    p.add_argument("--quick", action="store_true", help="the small table (a few minutes); the report stays in WORKDIR")
    p.add_argument("--only", type=names(PARTS), default=list(PARTS), help=f"parts to run: {','.join(PARTS)} (all)")
    p.add_argument(
        "--rows",
        type=re.compile,
        metavar="REGEX",
        help="only the table's rows whose name matches, e.g. '100 B records, 1 partition' (report in WORKDIR)",
    )
    p.add_argument(
        "--paths", type=names(PATHS), help=f"destinations of throughput and estate-steady rows: {','.join(PATHS)}"
    )
    p.add_argument(
        "--set",
        dest="settings",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a field of every row run (bench.scenarios.Scenario), e.g. partitions=16, max_time_ms=10000, seconds=20, "
        "warmup=10, rate=2000, 'paths=[filesystem,s3]', reference=false (repeatable; the report stays in WORKDIR)",
    )
    p.add_argument("--repeat", type=int, default=1, help="run the table this many times; the report shows the spread")
    p.add_argument(
        "--profile", action="store_true", help="py-spy and JFR on the throughput runs (their rates are not comparable)"
    )
    p.add_argument(
        "--spark",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a key of every mirror config's `spark:` block, e.g. max-offsets-per-job=200000 (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed for each wait of a scenario (1800)")
    p.add_argument("--workdir", type=Path, help="an empty or new directory for results, configs and logs (a temp dir)")
    p.add_argument("--output", type=Path, help=f"the report (default {DOCUMENT}; a partial run: WORKDIR/benchmarks.md)")
    p.add_argument(
        "--report-only", type=Path, metavar="WORKDIR", help="render the report of an earlier run, measure nothing"
    )
    return p


def rows(args: argparse.Namespace) -> list[Scenario]:
    """The rows this run measures: a kind's row alone, or the table's rows of the parts asked for; --paths and --set
    applied (rows that became the same are run once)."""
    if args.kind is not None:
        table = [ALONE[args.kind]]
    else:
        table = [s for s in (QUICK if args.quick else FULL) if s.kind in args.only]
    if args.rows is not None:
        table = [s for s in table if args.rows.search(s.name)]
        if not table:
            raise ValueError(f"--rows {args.rows.pattern}: no row of the table is named so")
    if args.paths:
        pathed = ("throughput", "estate-steady")
        table = [dataclasses.replace(s, paths=tuple(args.paths)) if s.kind in pathed else s for s in table]
    changed = [with_settings(s, dict(args.settings)) for s in table]
    first: dict[str, Scenario] = {}
    for s in changed:
        first.setdefault(s.name, s)
    return list(first.values())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.report_only is not None:
        output = args.output or args.report_only / "benchmarks.md"
        report.render(args.report_only, output)
        print(f"wrote {output}")
        return 0
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="mirror-v3-bench-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        parser().error(f"--workdir {workdir} is not empty")
    try:
        table = rows(args)
    except ValueError as exc:
        parser().error(str(exc))
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    runner.append(workdir, {**runner.machine(command), "spark": dict(args.spark)})
    ok = "micro" not in args.only or args.kind is not None or runner.run_micro(workdir, args.quick)
    failed = runner.run_table(
        table, workdir, repeat=args.repeat, profile=args.profile, timeout=args.timeout, spark=dict(args.spark)
    )
    runner.append(workdir, {"kind": "end", "finished": time.time(), "load": os.getloadavg(), "failed": failed})
    # docs/benchmarks.md is one whole run: a run of some parts or paths would replace it with those parts alone.
    partial = args.quick or args.kind is not None or bool(args.settings) or args.only != list(PARTS) or bool(args.paths)
    partial = partial or args.rows is not None
    output = (args.output or (workdir / "benchmarks.md" if partial else DOCUMENT)).resolve()
    report.render(workdir, output)
    print(f"results in {workdir / runner.RESULTS}; wrote {output}")
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
