"""The real CLI, run the way the end-to-end tests, the benchmarks and the quickstart need it.

    path = write_config(tmp / "mirror.yaml", bootstrap=b, destination=target.config(flush),
                        mirrors=[{"topic": "t", "partition": p} for p in range(3)])
    with MirrorRun(path, tmp / "run.log", env=target.env()) as run:
        run.wait_for_offsets(lambda p: target.next_offset("t", p), {0: 1000, 1: 1000, 2: 1000})
        run.drain()                     # SIGTERM, then exit code 0 or MirrorRunError with the log's tail

One builder writes every config, one launcher starts `python -m supervisor` from this checkout with its
environment, and every wait fails at once, with the log's tail, when the process exits before the wait is met.
"""

from __future__ import annotations

import calendar
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

REPO = Path(__file__).resolve().parent.parent
# One `key=value` field of a log line (LOG_FORMAT kv, the default); values with spaces are quoted.
_FIELD = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|\S*)')


class MirrorRunError(AssertionError):
    """The mirror process did not do what was waited for; the message carries its log's tail."""


def mirror_config(
    *,
    bootstrap: str,
    destination: Mapping[str, Any],
    mirrors: Sequence[Mapping[str, Any]],
    spark: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A config document. Each mirror is {topic, partition} with optional `name` (default `<topic>-<partition>`),
    `source` (keys added to the shared `source` defaults), `override` (destination-name-override) and `schemas`."""
    entries = []
    for m in mirrors:
        entry: dict[str, Any] = {
            "name": m.get("name", f"{m['topic']}-{m['partition']}"),
            "source": {"bootstrap-servers": bootstrap, **(source or {}), **m.get("source", {})},
            "topic": m["topic"],
            "partition": m["partition"],
        }
        if "override" in m:
            entry["destination-name-override"] = m["override"]
        if "schemas" in m:
            entry["schemas"] = m["schemas"]
        entries.append(entry)
    document: dict[str, Any] = {"destination": dict(destination), "mirrors": entries}
    if spark:
        document["spark"] = dict(spark)
    return document


def write_config(path: Path, **document: Any) -> Path:
    """`mirror_config(**document)` written as YAML to `path`."""
    path.write_text(yaml.safe_dump(mirror_config(**document), sort_keys=False))
    return path


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for the CLI: the checkout importable, no metrics port unless asked for."""
    env = dict(os.environ)
    env.setdefault("MIRROR_V3_METRICS_PORT", "0")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`python -m supervisor <args>` to completion; `env` adds to `cli_env()`."""
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=REPO,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class MirrorRun:
    """`python -m supervisor run --config <config>` in the background, its stderr (the log) in `log_path`.

    `env` adds to `cli_env()`; `metrics_port` serves /metrics there (see `metric()`).
    """

    def __init__(
        self,
        config: Path,
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        command: str = "run",  # or "restore"
        args: Sequence[str] = (),  # after --config
    ) -> None:
        self.log_path = log_path
        self.metrics_port = metrics_port
        extra = dict(env or {})
        if metrics_port is not None:
            extra["MIRROR_V3_METRICS_PORT"] = str(metrics_port)
        self.started_at = time.time()
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor", command, "--config", str(config), *args],
                cwd=REPO,
                env=cli_env(extra),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    # -------------------------------------------------------------------------------------------- the log

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        """The log's last lines, without Java stack frames."""
        kept = [line for line in self.log_text().splitlines() if not line.startswith(("\tat ", "\t... "))]
        return "\n".join(kept[-lines:])

    def errors(self) -> list[str]:
        """The ERROR lines of the log."""
        return [line for line in self.log_text().splitlines() if "level=ERROR" in line or '"level": "ERROR"' in line]

    def events(self, message: str) -> list[dict[str, str]]:
        """The fields of every `msg=<message>` line (kv log format), in order; `ts` stays a string."""
        found = []
        for line in self.log_text().splitlines():
            if f"msg={message} " not in line and f'msg="{message}"' not in line:
                continue
            fields = {k: v[1:-1] if v.startswith('"') else v for k, v in _FIELD.findall(line)}
            if fields.get("msg") == message:
                found.append(fields)
        return found

    # ------------------------------------------------------------------------------------------- waiting

    def wait_until(self, check: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> None:
        """Until `check()` is true; fails early if the process exits first."""
        deadline = time.monotonic() + timeout
        while True:
            if check():
                return
            if self.proc.poll() is not None:
                raise MirrorRunError(f"mirror exited {self.proc.returncode} before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise MirrorRunError(f"timed out after {timeout:g}s waiting for {what}:\n{self.tail()}")
            time.sleep(interval)

    def wait_for_log(self, pattern: str, timeout: float = 180, count: int = 1) -> re.Match[str]:
        """The `count`-th match of `pattern` in the log."""
        regex = re.compile(pattern)
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = list(regex.finditer(self.log_text()))
            return len(found) >= count

        self.wait_until(seen, timeout, f"/{pattern}/ x{count}", interval=0.1)
        return found[count - 1]

    def wait_for_offsets(
        self, next_offset: Callable[[int], int | None], ends: Mapping[int, int], timeout: float = 180
    ) -> None:
        """Until `next_offset(p) == ends[p]` for every partition p (the destination's view, read around mirror-v3)."""
        self.wait_until(
            lambda: all(next_offset(p) == end for p, end in ends.items()),
            timeout,
            f"the destination to reach {dict(ends)} (now { ({p: next_offset(p) for p in ends}) })",
        )

    def scrape(self) -> str:
        """The running mirror's /metrics text (needs `metrics_port`)."""
        import urllib.request

        assert self.metrics_port is not None, "MirrorRun(metrics_port=...) serves no metrics"
        return str(urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode())

    def metric(self, name: str, **labels: str | int) -> float | None:
        """The first sample of `name` whose labels include `labels`, from the running mirror's /metrics endpoint
        (needs `metrics_port`); None when there is none."""
        return self.samples((name,), **labels)[name]

    def samples(self, names: Sequence[str], **labels: str | int) -> dict[str, float | None]:
        """The first sample of each of `names` whose labels include `labels`, all from one scrape (series that move
        together are read at one moment)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.scrape()
        wanted = {key: str(value) for key, value in labels.items()}
        found: dict[str, float | None] = dict.fromkeys(names)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name in found
                    and found[sample.name] is None
                    and all(sample.labels.get(k) == v for k, v in wanted.items())
                ):
                    found[sample.name] = float(sample.value)
        return found

    def wait_for_metric(self, name: str, value: float, timeout: float = 30, **labels: str | int) -> None:
        """Until the first sample of `name` with `labels` equals `value`. A series moves a moment after what it
        counts is visible at the destination (the actor sets it when the sink's commit returns), so a test that
        has just seen the destination reach an offset waits for the series instead of reading it once."""
        self.wait_until(
            lambda: self.metric(name, **labels) == value,
            timeout,
            f"{name}{dict(labels)} to be {value:g} (now {self.metric(name, **labels)})",
        )

    # ------------------------------------------------------------------------------------------- ending

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def wait(self, timeout: float = 180) -> int:
        """The exit code, once the process has ended by itself (or by a signal sent before)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise MirrorRunError(f"mirror still running after {timeout:g}s:\n{self.tail()}") from None

    def drain(self, timeout: float = 120) -> float:
        """SIGTERM, then exit code 0 within `timeout`; returns the seconds the drain took."""
        began = time.monotonic()
        self.terminate()
        code = self.wait(timeout)
        if code != 0:
            raise MirrorRunError(f"mirror exited {code} after SIGTERM (expected 0):\n{self.tail()}")
        return time.monotonic() - began

    def expect_failure(self, code: int = 1, timeout: float = 180) -> str:
        """The process ends by itself with `code`, no traceback and exactly one ERROR line; returns that line. (A
        JSON line's `exc_info` holds its event's traceback inside the line: what must not be is a traceback printed
        on lines of its own.)"""
        actual = self.wait(timeout)
        errors = self.errors()
        printed = any(line.startswith("Traceback") for line in self.log_text().splitlines())
        if actual != code or len(errors) != 1 or printed:
            raise MirrorRunError(f"expected exit {code} with one ERROR line, got exit {actual}:\n{self.tail()}")
        return errors[0]

    def stop(self) -> None:
        """Whatever state it is in: gone (SIGKILL if still running)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def log_time(fields: Mapping[str, str]) -> float:
    """A log line's `ts=2025-01-02T03:04:05.678Z` as epoch seconds."""
    whole, _, millis = fields["ts"].rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(millis or 0) / 1000
