"""The status output: its committed JSON Schema is current and describes what `render_json` prints; the default
table fits 100 columns under a summary line, `--wide` shows every column, and the filters pick rows."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema

from commands.status import MirrorStatus, StatusReport, apply_rates, apply_states
from commands.status_view import (
    STANDARD_WIDTH,
    TABLE_COLUMNS,
    WIDE_COLUMNS,
    StatusFilter,
    age,
    render_json,
    render_table,
    summarize,
)
from telemetry.http import MirrorState, ProcessState, SparkLoad
from tools.generated import STATUS_SCHEMA


def report() -> StatusReport:
    return StatusReport(
        [
            MirrorStatus(
                "orders-0",
                "orders",
                0,
                "s3://b/p/orders/0/",
                "prod",
                source_log_start=0,
                source_end=10,
                source_high_watermark=11,
                destination_next=10,
                lag=0,
                high_watermark_lag=1,
                last_flush="2026-11-21T12:00:00Z",
                table_next=7,  # its archive's table is 3 offsets behind the chain
            ),
            MirrorStatus("orders-1", "orders", 1, "-", "prod", error="source cluster k:9092 unreachable: refused"),
        ]
    )


def test_json_output_matches_the_schema_with_every_key_present() -> None:
    schema = json.loads(STATUS_SCHEMA.path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    document = json.loads(render_json(report()))
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["ok"] is False
    ok_row, failed_row = document["mirrors"]
    assert ok_row["last-flush"] == "2026-11-21T12:00:00Z" and ok_row["error"] is None
    assert set(failed_row) == set(ok_row)
    assert failed_row["lag"] is None and "unreachable" in failed_row["error"]


def test_the_wide_table_shows_every_column_of_every_row_and_the_error() -> None:
    _, header, first, second = render_table(report(), wide=True).splitlines()
    assert tuple(header.split()) == WIDE_COLUMNS
    assert first.split()[:18] == [
        "orders-0",
        "orders",
        "0",
        "0",
        "10",
        "10",
        "7",
        "0",
        "-",
        "1",
        "held",
        "-",
        "-",
        "2026-11-21T12:00:00Z",
        "-",
        "prod",
        "-",
        "s3://b/p/orders/0/",
    ]
    assert second.split()[:15] == ["orders-1", "orders", "1", *["-"] * 12]
    assert second.endswith("source cluster k:9092 unreachable: refused")


def test_states_from_the_running_process_join_by_mirror_name_and_a_failed_one_is_not_ok() -> None:
    rows = report().rows
    state = ProcessState(
        draining=False,
        mirrors=[
            MirrorState("orders-0", "restarting", "destination /a: not a directory", restart_at=1.0),
            MirrorState("other-3", "running"),
        ],
    )
    apply_states(rows, state)
    assert [(r.state, r.failure) for r in rows] == [("restarting", "destination /a: not a directory"), ("absent", None)]
    rows[1].error = None
    report_ = StatusReport(rows, "http://127.0.0.1:7780")
    assert not report_.ok
    document = json.loads(render_json(report_))
    assert document["process"] == "http://127.0.0.1:7780" and document["mirrors"][0]["state"] == "restarting"
    first = render_table(report_, wide=True).splitlines()[2]
    assert first.split()[14] == "restarting" and first.endswith("process: destination /a: not a directory")
    rows[0].state, rows[0].failure = "running", None
    assert StatusReport(rows, "http://127.0.0.1:7780").ok


def test_a_table_without_rows_is_its_summary_and_header() -> None:
    assert render_table(StatusReport([])).splitlines() == [
        "0 mirrors: 0 lagging, 0 failed; lag 0 records, oldest pending -",
        "  ".join(TABLE_COLUMNS),
    ]


def test_watch_rates_and_eta_come_from_the_previous_refresh() -> None:
    def row(name: str, next_offset: int | None, lag: int | None) -> MirrorStatus:
        return MirrorStatus(name, "orders", 0, "-", "prod", destination_next=next_offset, lag=lag)

    previous = StatusReport([row("a", 1_000, 9_000), row("b", 500, 0), row("c", None, None)])
    now = [row("a", 3_000, 7_000), row("b", 500, 0), row("c", 10, 5)]
    apply_rates(now, previous, elapsed_s=4.0)
    a, b, c = now
    assert (a.rate, a.eta_seconds) == (500.0, 14.0)
    assert (b.rate, b.eta_seconds) == (0.0, 0.0)  # caught up: nothing to wait for
    assert (c.rate, c.eta_seconds) == (None, None)  # no earlier position to compare with
    line = render_table(StatusReport([a]), wide=True).splitlines()[2]
    assert " 500 " in line and " 0m14s " in line


def test_an_unknown_destination_position_leaves_the_lag_unknown_and_a_hold_shows() -> None:
    held = MirrorStatus(
        "h", "orders", 0, "-", "prod", source_end=100, destination_next=100, lag=0, high_watermark_lag=150
    )
    table = render_table(StatusReport([held]), wide=True)
    assert table.splitlines()[2].split()[9:11] == ["150", "held"]  # LAG-HW, HELD-SINCE (no process: time unknown)
    apply_states([held], ProcessState(False, [MirrorState("h", "running", held_since=0.0)]))
    assert held.held_since == "1970-01-01T00:00:00Z"


def test_the_running_processs_spark_load_is_one_line_under_the_table_and_in_the_json() -> None:
    load = SparkLoad(60.0, 1.5, 1.25, 42.5, 0.12, 0.9)
    with_load = StatusReport(report().rows, "http://127.0.0.1:7780", load)
    assert render_table(with_load).splitlines()[-1] == (
        "spark (last 60s): 1.5 jobs/s (1.25 shared), 42.5 partitions per job, flush wait p50 0.12s max 0.9s"
    )
    schema = json.loads(STATUS_SCHEMA.path.read_text(encoding="utf-8"))
    document = json.loads(render_json(with_load))
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["spark"]["partitions-per-job"] == 42.5 and json.loads(render_json(report()))["spark"] is None


def test_records_deleted_before_they_were_mirrored_make_the_row_data_lost_and_status_fail() -> None:
    rows = report().rows
    rows[0].lost = "1000..1499"  # as _query_one finds it with source.on-data-loss: fail
    apply_states(rows, ProcessState(draining=False, mirrors=[MirrorState("orders-0", "running")]))
    assert rows[0].state == "data-lost"  # whatever the process says: every start will fail
    rows[1].error = None
    report_ = StatusReport(rows, "http://127.0.0.1:7780")
    assert not report_.ok
    line = render_table(report_, wide=True).splitlines()[2]
    assert "data-lost" in line.split() and "source offsets 1000..1499 were deleted" in line
    apply_states(rows, None)  # no process answered: still data-lost, the other row unknown
    assert [r.state for r in rows] == ["data-lost", None]
    jsonschema.validate(json.loads(render_json(StatusReport(rows))), json.loads(STATUS_SCHEMA.path.read_text()))


def estate() -> StatusReport:
    """Rows as an estate shows them: long topic names and errors, lags, a failed mirror, two clusters."""
    long_topic = "payments.settlement.v2.events-with-a-long-name"
    rows = [
        MirrorStatus(f"{long_topic}-{p}", long_topic, p, "s3://b/p/x/", "eu", lag=p * 10, lag_seconds=p * 1.5)
        for p in range(3)
    ]
    rows[0].last_flush = "2026-11-25T23:59:50Z"
    rows.append(
        MirrorStatus(
            "orders-0", "orders", 0, "/data/orders/0", "us", lag=0, lag_seconds=0.0, state="failed", failure="x" * 300
        )
    )
    rows.append(MirrorStatus("orders-1", "orders", 1, "-", "us", error="source cluster us unreachable: " + "y" * 200))
    return StatusReport(rows, "http://127.0.0.1:7780")


NOW = 1_795_651_200.0  # 2026-11-26T00:00:00Z


def test_the_default_table_fits_a_hundred_columns_under_a_summary_line() -> None:
    summary, header, *lines = render_table(estate(), now=NOW).splitlines()
    rows, below = lines[:5], lines[5:]
    # One row's lag is unknown (its cluster did not answer): the total is a lower bound.
    assert summary == "5 mirrors: 2 lagging, 1 failed, 1 not queried; lag at least 30 records, oldest pending 3.0s"
    assert tuple(header.split()) == ("CLUSTER", *TABLE_COLUMNS)  # two clusters: each row names its own
    assert all(len(line) <= STANDARD_WIDTH for line in (header, *rows))
    # The errors cut to fit, whole under the table.
    assert below == [f"us orders 0: process: {'x' * 300}", f"us orders 1: source cluster us unreachable: {'y' * 200}"]
    first = rows[0].split()
    assert first[0] == "eu" and first[1].endswith("…") and len(first[1]) == 30  # the cluster, the topic cut
    assert first[2:7] == ["0", "-", "0", "0.0s", "10s"] and first[7] == "ago"  # partition, state, lag, lag-s, flush
    assert rows[3].split()[:6] == ["us", "orders", "0", "failed", "0", "0.0s"] and rows[3].endswith("…")
    assert "process: xxx" in rows[3]


def test_one_clusters_rows_need_no_cluster_column() -> None:
    rows = [MirrorStatus("orders-0", "orders", 0, "-", "prod", lag=5, lag_seconds=1.0)]
    summary, header = render_table(StatusReport(rows), now=NOW).splitlines()[:2]
    assert tuple(header.split()) == TABLE_COLUMNS
    assert summary == "1 mirror: 1 lagging, 0 failed; lag 5 records, oldest pending 1.0s"


def test_nothing_answered_is_an_unknown_lag_never_zero() -> None:
    """A cluster that did not answer: the summary says so, and the lag is unknown (JSON null), not 0."""
    rows = [MirrorStatus("orders-0", "orders", 0, "-", "prod", error="source cluster prod unreachable: refused")]
    down = StatusReport(rows, unreadable={"prod": "source cluster prod unreachable: refused"})
    assert not down.ok
    assert render_table(down).splitlines()[0] == (
        "1 mirror: 0 lagging, 0 failed, 1 not queried, 1 cluster unreadable; lag unknown, oldest pending -"
    )
    document = json.loads(render_json(down))
    jsonschema.validate(document, json.loads(STATUS_SCHEMA.path.read_text()))
    assert document["summary"]["total-lag"] is None and document["summary"]["lag-unknown"] == 1
    # A cluster whose selections could not be listed: what is known is a lower bound.
    answered = [MirrorStatus("orders-0", "orders", 0, "-", "prod", lag=7)]
    partial = StatusReport(answered, unreadable={"dr": "refused"})
    assert "; lag at least 7 records," in render_table(partial).splitlines()[0]
    assert json.loads(render_json(partial))["summary"]["total-lag"] == 7
    nothing = StatusReport([], unreadable={"dr": "refused"})
    assert "; lag unknown," in render_table(nothing).splitlines()[0]


def test_at_most_ten_cut_errors_are_written_under_the_table() -> None:
    rows = [MirrorStatus(f"t-{p}", "t", p, "-", "eu", error="e" * 200) for p in range(12)]
    lines = render_table(StatusReport(rows), now=NOW).splitlines()
    assert len(lines) == 2 + 12 + 10 + 1
    assert lines[-1] == "... and 2 more errors: status --failed --wide shows them"


def test_the_wide_table_keeps_everything_uncut() -> None:
    wide = render_table(estate(), wide=True, now=NOW)
    assert "x" * 300 in wide and "payments.settlement.v2.events-with-a-long-name" in wide


def test_filters_pick_rows_by_cluster_topic_lag_and_failure() -> None:
    def names(shown: StatusFilter) -> list[str]:
        return [row.name for row in shown.apply(estate()).rows]

    assert names(StatusFilter(cluster="us")) == ["orders-0", "orders-1"]
    assert names(StatusFilter(topic="ord.*")) == ["orders-0", "orders-1"]
    assert names(StatusFilter(topic="ord")) == []  # the whole name, as a selection's topic-regex
    assert len(names(StatusFilter(lagging=True))) == 2
    assert names(StatusFilter(failed=True)) == ["orders-0", "orders-1"]
    assert names(StatusFilter(cluster="eu", failed=True)) == []
    assert StatusFilter(cluster="eu").apply(estate()).ok  # ok speaks for the rows shown
    down = replace(estate(), unreadable={"us": "refused"})
    assert StatusFilter(cluster="eu").apply(down).ok and not StatusFilter(failed=True).apply(down).ok


def test_the_json_document_carries_the_summary() -> None:
    document = json.loads(render_json(estate()))
    jsonschema.validate(document, json.loads(STATUS_SCHEMA.path.read_text()))
    assert document["summary"] == {
        "mirrors": 5,
        "lagging": 2,
        "failed": 1,
        "errors": 1,
        "lag-unknown": 1,
        "total-lag": 30,
        "oldest-pending-seconds": 3.0,
    }
    assert document["mirrors"][1]["lag-seconds"] == 1.5
    assert summarize(StatusReport([])).oldest_pending_seconds is None


def test_the_running_processs_pending_age_is_each_rows_lag_in_seconds() -> None:
    rows = report().rows
    apply_states(rows, ProcessState(False, [MirrorState("orders-0", "running", pending_age=4.25)]))
    assert [row.lag_seconds for row in rows] == [4.25, None]


def test_ages_read_as_an_operator_reads_them() -> None:
    assert [age(s) for s in (0.42, 12.4, 185, 7_620, 277_200)] == ["0.4s", "12s", "3m05s", "2h07m", "3d05h"]
