"""`verify`'s report as people and programs read it: the table with a line per difference, naming the offset and the
fields; the JSON whose `ok` is the exit code's."""

from __future__ import annotations

import json

from commands.verify import FoundDifference, MirrorVerification, VerifyReport, render_json, render_table


def _report() -> VerifyReport:
    exact = MirrorVerification("orders-1", "orders", 1, "prod", "/archive/orders/1", 0, 2_500, 2_500, 0, 0, 0, 0)
    tampered = MirrorVerification(
        "orders-0", "orders", 0, "prod", "/archive/orders/0", 0, 3_000, 2_998, 1, 1, 1, 0,
        problems=["/archive/orders/0/x.parquet: 1 duplicate offset"],
        differences=[
            FoundDifference(703, "different", ["value"]),
            FoundDifference(710, "missing", []),
            FoundDifference(720, "duplicate", []),
        ],
    )  # fmt: skip
    return VerifyReport([exact, tampered])


def test_each_difference_is_a_line_naming_its_offset_and_fields() -> None:
    lines = render_table(_report()).splitlines()
    assert lines[-3:] == [
        "orders-0: offset 703: different (value)",
        "orders-0: offset 710: missing",
        "orders-0: offset 720: duplicate",
    ]
    (row,) = [line for line in lines if line.startswith("orders-0 ")]
    assert "0-2999" in row and "2998" in row and "1 duplicate offset" in row


def test_the_json_is_not_ok_when_a_mirror_differs() -> None:
    document = json.loads(render_json(_report()))
    assert document["ok"] is False
    assert [(m["name"], m["equal"], m["different"]) for m in document["mirrors"]] == [
        ("orders-1", 2_500, 0),
        ("orders-0", 2_998, 1),
    ]
    assert document["mirrors"][1]["differences"][0] == {"offset": 703, "kind": "different", "fields": ["value"]}
