"""bench.idle's pure helpers: /proc and `ss` parsing, the topic layout, the config, py-spy summaries, output."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from bench.idle import (
    CLOCK_TICKS,
    PAGE_SIZE,
    IdleResult,
    busiest_threads,
    console_idle,
    markdown_idle,
    parse_ss,
    parse_stat,
    summarize_profile,
    topic_layout,
    write_idle_config,
)
from config.loader import load_config

MiB = 1024 * 1024


def test_parse_stat_survives_spaces_and_parentheses_in_the_name() -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    # priority nice num_threads itrealvalue starttime vsize rss ...
    line = "4242 (Spark (x) y) S 7 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 31 0 12345 999999 2560 18446744"
    stat = parse_stat(line)
    assert (stat.pid, stat.ppid, stat.comm) == (4242, 7, "Spark (x) y")
    assert stat.cpu_seconds == 300 / CLOCK_TICKS
    assert stat.threads == 31
    assert stat.rss_bytes == 2560 * PAGE_SIZE


def test_parse_ss_sums_only_the_given_process() -> None:
    out = "\n".join(
        [
            '0 0 127.0.0.1:50000 127.0.0.1:9092 users:(("python",pid=11,fd=7))',
            "\t cubic bytes_sent:100 bytes_acked:101 bytes_received:40 segs_out:3 data_segs_in:2",
            '0 0 127.0.0.1:50001 127.0.0.1:9092 users:(("java",pid=12,fd=9))',
            "\t cubic bytes_sent:5000 bytes_received:7000",
            '0 0 127.0.0.1:50002 127.0.0.1:9092 users:(("python",pid=11,fd=8))',
            "\t cubic bytes_sent:20 bytes_received:60",
        ]
    )
    assert parse_ss(out, 11) == (120, 100)
    assert parse_ss(out, 13) == (0, 0)


def test_busiest_threads_folds_numbers_and_counts_new_threads_from_zero() -> None:
    before = {1: ("GC Thread#0", 1.0), 2: ("GC Thread#1", 2.0), 3: ("main", 5.0)}
    after = {1: ("GC Thread#0", 1.5), 2: ("GC Thread#1", 2.5), 3: ("main", 5.0), 4: ("C2 CompilerThre", 0.2)}
    assert busiest_threads(before, after, 2.0) == (("GC Thread#N", 0.5), ("CN CompilerThre", 0.1))


def test_topic_layout_adds_up_to_the_mirror_count() -> None:
    assert topic_layout(10) == [("idle-10-0", 10)]
    assert topic_layout(250) == [("idle-250-0", 100), ("idle-250-1", 100), ("idle-250-2", 50)]
    assert sum(partitions for _, partitions in topic_layout(1000)) == 1000


def test_config_has_one_mirror_per_partition_and_loads(tmp_path: Path) -> None:
    path = write_idle_config(
        tmp_path / "config.yaml",
        bootstrap="127.0.0.1:9092",
        root=tmp_path / "data",
        layout=topic_layout(150),
        source_settings={"request-timeout-ms": 120000},
    )
    raw = yaml.safe_load(path.read_text())
    assert raw["spark"] == {"master": "local[*]"}
    config = load_config(str(path))
    assert len(config.mirrors) == 150
    assert config.mirrors[0].name == "idle-idle-150-0-0" and config.mirrors[-1].name == "idle-idle-150-1-49"
    assert {m.source.request_timeout_ms for m in config.mirrors} == {120000}
    assert len({(m.topic, m.partition) for m in config.mirrors}) == 150


PROFILE = "\n".join(
    [
        "thread (1): MainThread;<module> (supervisor/__main__.py);run (anyio/_core/_eventloop.py);"
        "BaseEventLoop._run_once (asyncio/base_events.py);Handle._run (asyncio/events.py);"
        "MirrorActor._ingest (supervisor/actor.py);Fetcher._proc_offset_request (aiokafka/consumer/fetcher.py) 6",
        "thread (1): MainThread;<module> (supervisor/__main__.py);run (anyio/_core/_eventloop.py);"
        "BaseEventLoop._run_once (asyncio/base_events.py);EpollSelector.select (selectors.py) 2",
        "thread (2): Thread-1;Thread._bootstrap (threading.py);FinalizerWorker.run (py4j/clientserver.py) 2",
    ]
)


def test_profile_counts_what_runs_under_the_event_loop() -> None:
    summary = summarize_profile(PROFILE, rate=10, seconds=1)
    assert summary is not None
    assert summary.samples == 10
    assert summary.busy_threads == 1.0
    assert dict(summary.threads) == {"MainThread": 0.8, "Thread-1": 0.2}
    below = dict(summary.below_loop)
    assert below["supervisor"] == 0.6 and below["aiokafka"] == 0.6 and below["selectors"] == 0.2
    assert "anyio" not in below  # above the dispatch: on every main-thread stack, says nothing
    assert dict(summary.innermost) == {"aiokafka": 0.6, "selectors": 0.2, "py4j": 0.2}
    assert dict(summary.functions)["MirrorActor._ingest"] == 0.6
    assert summarize_profile("", rate=10, seconds=1) is None


def _result(**changes: object) -> IdleResult:
    base = IdleResult(
        mirrors=1000,
        started=1000,
        startup_seconds=37.4,
        spark_seconds=12.8,
        settle_seconds=30,
        sample_seconds=30.0,
        load_average=2.5,
        rss_python_max_bytes=160 * MiB,
        rss_python_last_bytes=159 * MiB,
        rss_jvm_max_bytes=290 * MiB,
        rss_jvm_last_bytes=290 * MiB,
        rss_total_max_bytes=450 * MiB,
        rss_total_last_bytes=449 * MiB,
        cpu_python_cores=0.301,
        cpu_python_loop_cores=0.3,
        cpu_jvm_cores=0.003,
        cpu_broker_cores=0.074,
        python_fds=12,
        python_threads=11,
        jvm_threads=55,
        source_sent_kib_per_second=66.4,
        source_received_kib_per_second=117.6,
        jvm_busiest_threads=(("VM Periodic Tas", 0.002),),
        startup_cpu_seconds=30.2,
        startup_cpu_python_seconds=18.0,
        log_errors=0,
        log_warnings=0,
        first_error=None,
        failed=None,
        drain_seconds=1.2,
        exit_code=0,
        poll_interval_ms=500,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_markdown_has_the_heading_and_one_row_per_count() -> None:
    lines = markdown_idle([_result(mirrors=100), _result()])
    assert lines[0] == "### Idle mirrors"
    header = next(line for line in lines if line.startswith("| mirrors | RSS Python"))
    assert header.count("|") == 10
    rows = [line for line in lines if line.startswith("| 1")]
    assert rows[0].startswith("| 100 | 160 | 290 | 450 | 0.301 | 0.003 | 12 | 11 | 37.4 |")
    assert rows[1].startswith("| 1,000 |")
    assert markdown_idle([]) == []


def test_a_failed_run_says_so_everywhere() -> None:
    failed = _result(
        started=0,
        startup_seconds=None,
        failed="exited 1 after 48.7 s during start-up",
        first_error="mirror failed: metadata request failed: timed out (mirror idle-idle-1000-6-70)",
        drain_seconds=None,
        exit_code=1,
        log_errors=120,
    )
    text = "\n".join(markdown_idle([failed]))
    assert "**failed**: exited 1 after 48.7 s during start-up (0 started)" in text
    assert "`mirror failed: metadata request failed: timed out (mirror idle-idle-1000-6-70)`" in text
    console = console_idle([failed])
    assert "FAILED: exited 1 after 48.7 s during start-up" in console[0]
    assert console[1].strip().startswith("first ERROR: mirror failed")
