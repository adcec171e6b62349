"""The status output: its committed JSON Schema is current and describes what `render_json` prints."""

from __future__ import annotations

import json

import jsonschema

from supervisor.http import MirrorState, ProcessState, SparkLoad
from supervisor.status import (
    TABLE_COLUMNS,
    MirrorStatus,
    StatusReport,
    apply_rates,
    apply_states,
    render_json,
    render_table,
)
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


def test_table_shows_every_row_and_the_error() -> None:
    header, first, second = render_table(report()).splitlines()
    assert tuple(header.split()) == TABLE_COLUMNS
    assert first.split()[:16] == [
        "orders-0",
        "orders",
        "0",
        "0",
        "10",
        "10",
        "0",
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
    assert second.split()[:13] == ["orders-1", "orders", "1", *["-"] * 10]
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
    report_ = StatusReport(rows, "http://127.0.0.1:9090")
    assert not report_.ok
    document = json.loads(render_json(report_))
    assert document["process"] == "http://127.0.0.1:9090" and document["mirrors"][0]["state"] == "restarting"
    first = render_table(report_).splitlines()[1]
    assert first.split()[12] == "restarting" and first.endswith("process: destination /a: not a directory")
    rows[0].state, rows[0].failure = "running", None
    assert StatusReport(rows, "http://127.0.0.1:9090").ok


def test_a_table_without_rows_is_its_header() -> None:
    assert render_table(StatusReport([])) == "  ".join(TABLE_COLUMNS)


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
    line = render_table(StatusReport([a])).splitlines()[1]
    assert " 500 " in line and " 0m14s " in line


def test_an_unknown_destination_position_leaves_the_lag_unknown_and_a_hold_shows() -> None:
    held = MirrorStatus(
        "h", "orders", 0, "-", "prod", source_end=100, destination_next=100, lag=0, high_watermark_lag=150
    )
    table = render_table(StatusReport([held]))
    assert table.splitlines()[1].split()[7:9] == ["150", "held"]  # LAG-HW, HELD-SINCE (no process: time unknown)
    apply_states([held], ProcessState(False, [MirrorState("h", "running", held_since=0.0)]))
    assert held.held_since == "1970-01-01T00:00:00Z"


def test_the_running_processs_spark_load_is_one_line_under_the_table_and_in_the_json() -> None:
    load = SparkLoad(60.0, 1.5, 1.25, 42.5, 0.12, 0.9)
    with_load = StatusReport(report().rows, "http://127.0.0.1:9090", load)
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
    report_ = StatusReport(rows, "http://127.0.0.1:9090")
    assert not report_.ok
    line = render_table(report_).splitlines()[1]
    assert "data-lost" in line.split() and "source offsets 1000..1499 were deleted" in line
    apply_states(rows, None)  # no process answered: still data-lost, the other row unknown
    assert [r.state for r in rows] == ["data-lost", None]
    jsonschema.validate(json.loads(render_json(StatusReport(rows))), json.loads(STATUS_SCHEMA.path.read_text()))
