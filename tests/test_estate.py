"""Selections, destination names, collisions and shards (config.estate): pure, against metadata values."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from config import ConfigError, parse_config
from config.errors import DestinationCollisionError, MirrorLoopError
from config.estate import MissingTopic, Shard, compile_entries, expand, shard_of

PROD = {"bootstrap-servers": "prod:9092"}
DR = {"bootstrap-servers": "dr:9092"}


def config(*entries: dict[str, Any], **top: Any) -> Any:
    document = {
        "destination": {"type": "filesystem", "root": "/d"},
        "clusters": {"prod": PROD, "dr": DR},
        "mirrors": list(entries),
        **top,
    }
    return parse_config(yaml.safe_dump(document), env={})


def keys(plan: Any) -> list[tuple[str, str, int]]:
    return [spec.key for spec in plan.mirrors]


METADATA = {
    "prod": {
        "orders": 4,
        "payments": 2,
        "payments-dlq": 1,
        "audit": 1,
        "__consumer_offsets": 50,
        "_schemas": 1,
        "__strimzi-internal": 1,
    },
    "dr": {"orders": 2},
}


def test_a_regex_selects_all_partitions_of_matching_topics_but_no_internal_ones() -> None:
    entries = compile_entries(
        config({"name": "estate", "cluster": "prod", "topic-regex": ".*", "exclude-regex": ".*-dlq"})
    )
    plan = expand(entries, METADATA)
    assert keys(plan) == [
        ("prod", "audit", 0),
        *[("prod", "orders", p) for p in range(4)],
        ("prod", "payments", 0),
        ("prod", "payments", 1),
    ]
    assert plan.mirrors[1].name == "estate.orders-0"
    assert plan.mirrors[1].destination_name == "orders"


def test_regexes_match_whole_names() -> None:
    entries = compile_entries(config({"name": "e", "cluster": "prod", "topic-regex": "pay"}))
    assert keys(expand(entries, METADATA)) == []
    entries = compile_entries(config({"name": "e", "cluster": "prod", "topic-regex": "pay.*", "partitions": [1, 7]}))
    assert keys(expand(entries, METADATA)) == [("prod", "payments", 1)]  # partition 7 does not exist (yet)


def test_internal_topics_only_when_named() -> None:
    entries = compile_entries(
        config({"name": "e", "cluster": "prod", "topics": ["_schemas", "orders"], "partitions": [0]})
    )
    assert keys(expand(entries, METADATA)) == [("prod", "_schemas", 0), ("prod", "orders", 0)]


def test_named_topics_that_do_not_exist_are_reported() -> None:
    entries = compile_entries(config({"name": "e", "cluster": "prod", "topics": ["orders", "later"]}))
    plan = expand(entries, METADATA)
    assert plan.missing == (MissingTopic("mirrors[0]", "prod", "later"),)
    assert len(plan.mirrors) == 4


def test_single_form_needs_no_metadata_and_keeps_its_name() -> None:
    entries = compile_entries(config({"name": "one", "source": PROD, "topic": "t", "partition": 3}))
    (spec,) = expand(entries, {}).mirrors
    assert (spec.name, spec.cluster, spec.topic, spec.partition, spec.destination_name) == (
        "one",
        "prod:9092",
        "t",
        3,
        "t",
    )
    assert spec.source_field == "mirrors[0].source"


def test_a_selection_whose_cluster_was_not_read_selects_nothing() -> None:
    entries = compile_entries(config({"name": "e", "cluster": "dr", "topics": ["orders"]}))
    assert expand(entries, {"prod": METADATA["prod"]}).mirrors == ()


def test_destination_name_rules_and_defaults() -> None:
    entries = compile_entries(
        config(
            {"name": "a", "cluster": "prod", "topics": ["orders"], "partitions": [0]},
            {
                "name": "b",
                "cluster": "dr",
                "topics": ["orders"],
                "partitions": [0],
                "destination-name": {"regex": "^(or)ders$", "replacement": r"\1-x", "suffix": ".dr"},
            },
            defaults={"destination-name": {"prefix": "prod."}},
        )
    )
    names = {spec.key: spec.destination_name for spec in expand(entries, METADATA).mirrors}
    assert names == {("prod", "orders", 0): "prod.orders", ("dr", "orders", 0): "or-x.dr"}


def test_entries_inherit_flush_from_defaults_then_the_destination() -> None:
    document = config(
        {"name": "a", "cluster": "prod", "topic": "t", "partition": 0},
        {"name": "b", "cluster": "prod", "topic": "t", "partition": 1, "flush": {"max-offsets": 7}},
        defaults={"flush": {"max-offsets": 5}},
    )
    a, b = compile_entries(document)
    assert (a.flush.max_offsets, b.flush.max_offsets) == (5, 7)
    plain = compile_entries(config({"name": "a", "cluster": "prod", "topic": "t", "partition": 0}))
    assert plain[0].flush == plain[0].flush.__class__()  # the destination's default flush


def test_disabled_entries_mirror_nothing() -> None:
    entries = compile_entries(config({"name": "a", "cluster": "prod", "topic-regex": ".*", "enabled": False}))
    assert entries == ()


def test_two_clusters_onto_one_name_collide_online_naming_both() -> None:
    entries = compile_entries(
        config(
            {"name": "a", "cluster": "prod", "topic-regex": "orders"},
            {"name": "b", "cluster": "dr", "topic-regex": "orders"},
        )
    )
    with pytest.raises(DestinationCollisionError) as caught:
        expand(entries, METADATA)
    error = caught.value
    assert (error.destination, error.partition) == ("orders", 0)
    assert (error.first.cluster, error.first.topic, error.first.index) == ("prod", "orders", 0)
    assert (error.second.cluster, error.second.topic, error.second.index) == ("dr", "orders", 1)
    assert "would both write it" in str(error)


def test_a_rule_mapping_two_named_topics_onto_one_name_fails_offline() -> None:
    rule = {"regex": "-dlq$", "replacement": ""}
    with pytest.raises(ConfigError) as caught:
        config({"name": "a", "cluster": "prod", "topics": ["payments", "payments-dlq"], "destination-name": rule})
    message = str(caught.value)
    assert message.startswith("mirrors[0]: destination payments/0: ")
    assert "payments-dlq-0" in message and "(prod: payments-0)" in message


def test_one_partition_selected_by_two_entries_is_a_collision() -> None:
    entries = compile_entries(
        config(
            {"name": "a", "cluster": "prod", "topic-regex": "orders"},
            {"name": "b", "cluster": "prod", "topic": "orders", "partition": 2},
        )
    )
    with pytest.raises(DestinationCollisionError) as caught:
        expand(entries, METADATA)
    first, second = caught.value.first, caught.value.second
    assert (first.index, second.index) == (0, 1) and caught.value.path == ("mirrors", 1)
    assert (first.cluster, first.topic, first.partition) == (second.cluster, second.topic, second.partition)
    assert (caught.value.destination, caught.value.partition) == ("orders", 2)


def test_shards_split_the_estate_exactly_and_agree_on_owners() -> None:
    metadata = {"prod": {f"t{i}": 12 for i in range(10)}}
    entries = compile_entries(config({"name": "e", "cluster": "prod", "topic-regex": "t.*"}))
    everything = set(keys(expand(entries, metadata)))
    for count in (1, 2, 3, 5):
        owned = [set(keys(expand(entries, metadata, Shard(i, count)))) for i in range(count)]
        assert set().union(*owned) == everything
        assert sum(len(o) for o in owned) == len(everything)  # disjoint
        for i, keys_of_shard in enumerate(owned):
            assert all(shard_of(*key, count) == i for key in keys_of_shard)
        plan = expand(entries, metadata, Shard(0, count))
        assert plan.other_shards == len(everything) - len(plan.mirrors)
    spread = Counter(shard_of(*key, 3) for key in everything)
    assert min(spread.values()) > len(everything) / 3 * 0.6  # roughly even


def test_shard_owners_are_stable_across_processes() -> None:
    assert shard_of("prod", "orders", 0, 7) == shard_of("prod", "orders", 0, 7)
    assert [shard_of("prod", "orders", p, 4) for p in range(8)] == [shard_of("prod", "orders", p, 4) for p in range(8)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0/3", None),
        ("2/3", None),
        ("3/3", "--shard: shard index 3 is out of range for 3 shards (0..2)"),
        ("1/0", "--shard: expected I/N with N >= 1"),
        ("x", "--shard: expected I/N with N >= 1"),
        ("-1/2", "--shard: expected I/N with N >= 1"),
    ],
)
def test_shard_flag(text: str, message: str | None) -> None:
    if message is None:
        assert str(Shard.parse(text, "--shard")) == text
        return
    with pytest.raises(ConfigError) as caught:
        Shard.parse(text, "--shard")
    assert str(caught.value).startswith(message)


ORDERS = {"name": "e", "cluster": "prod", "topics": ["orders"]}
BAD_CONFIGS = [
    ({**ORDERS, "topic-regex": "orders["}, {}, "mirrors[0].topic-regex: invalid regular expression 'orders[': "),
    ({**ORDERS, "exclude-regex": "(x"}, {}, "mirrors[0].exclude-regex: invalid regular expression '(x': "),
    ({**ORDERS, "cluster": "nope"}, {}, "mirrors[0].cluster: unknown cluster 'nope' (clusters: dr, prod)"),
    ({**ORDERS, "source": PROD}, {}, "mirrors[0].source: set only one of `source`"),
    ({"name": "e", "topics": ["orders"]}, {}, "mirrors[0].source: required field is missing"),
    ({**ORDERS, "topic": "orders", "partition": 0}, {}, "mirrors[0].topics: an entry is either one topic"),
    ({"name": "e", "cluster": "prod", "partition": 0}, {}, "mirrors[0].topic: required with `partition`"),
    ({"name": "e", "cluster": "prod", "topic": "t"}, {}, "mirrors[0].partition: required with `topic`"),
    (
        {"name": "e", "cluster": "prod", "topic": "t", "partition": 0, "exclude-regex": "x"},
        {},
        "mirrors[0].exclude-regex: only for a selection",
    ),
    (
        {"name": "e", "cluster": "prod", "topic": "t", "partition": 0, "partitions": "all"},
        {},
        "mirrors[0].partitions: only for a selection",
    ),
    ({"name": "e", "cluster": "prod"}, {}, "mirrors[0]: select what to mirror"),
    ({**ORDERS, "destination-name-override": "x"}, {}, "mirrors[0].destination-name-override: only for one topic"),
    (
        {**ORDERS, "destination-name": {"regex": "o"}},
        {},
        "mirrors[0].destination-name.replacement: `regex` and `replacement` go together",
    ),
    (
        {**ORDERS, "destination-name": {"regex": "(o)", "replacement": r"\2"}},
        {},
        "mirrors[0].destination-name.replacement: '\\\\2': ",
    ),
    ({**ORDERS, "destination-name": {"prefix": "a/"}}, {}, "mirrors[0].destination-name.prefix: "),
    (
        {**ORDERS, "destination-name": {"regex": "s", "replacement": "/"}},
        {},
        "mirrors[0].destination-name: topic 'orders' becomes 'order/', which is not a valid destination name",
    ),
    ({**ORDERS, "partitions": "some"}, {}, "mirrors[0].partitions: "),
    ({**ORDERS, "partitions": [-1]}, {}, "mirrors[0].partitions[0]: Expected int >= 0"),
    (ORDERS, {"clusters": {"bad name": PROD}}, 'clusters["bad name"]: invalid cluster name'),
    (ORDERS, {"discovery": {"interval-ms": 10}}, "discovery.interval-ms: Expected int >= 1000"),
    (
        ORDERS,
        {"defaults": {"destination-name": {"regex": "(", "replacement": ""}}},
        "defaults.destination-name.regex: invalid regular expression",
    ),
    (
        ORDERS,
        {"clusters": {"prod": {**PROD, "security": {"protocol": "SASL_SSL"}}}},
        "clusters.prod.security.sasl: protocol SASL_SSL needs a sasl block",
    ),
    ({**ORDERS, "enabled": "no"}, {}, "mirrors[0].enabled: Expected bool"),
]


@pytest.mark.parametrize(("entry", "top", "prefix"), BAD_CONFIGS)
def test_bad_selection_configs_name_the_field(entry: dict[str, Any], top: dict[str, Any], prefix: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(entry, **top)
    assert str(caught.value).startswith(prefix), str(caught.value)


def test_start_at_forms() -> None:
    (entry,) = compile_entries(config({**ORDERS, "start-at": "2026-11-01T00:00:00Z"}))
    assert entry.start_at == 1_793_491_200_000
    (entry,) = compile_entries(config(ORDERS, defaults={"start-at": "latest"}))
    assert entry.start_at == "latest"
    (entry,) = compile_entries(config(ORDERS))
    assert entry.start_at == "earliest"


def test_start_at_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        config({**ORDERS, "start-at": "2026-11-01T00:00:00"})  # no zone: whose midnight?
    assert caught.value.path == ("mirrors", 0, "start-at")
    assert caught.value.problem.startswith("expected earliest, latest or an ISO 8601 time")
    kafka = {"type": "kafka", "bootstrap-servers": "k:9092"}
    document = {"destination": kafka, "clusters": {"prod": PROD}, "mirrors": [{**ORDERS, "start-at": "latest"}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_dump(document), env={})
    assert caught.value.path == ("mirrors", 0, "start-at") and "offsets: preserve" in caught.value.problem


def on_destination_cluster(*entries: dict[str, Any]) -> Any:
    """Entries of a config whose Kafka destination is the `dr` cluster (written in another order and case)."""
    destination = {"type": "kafka", "bootstrap-servers": "DR:9092", "offsets": "renumber"}
    return config(*entries, destination=destination)


def test_copies_written_back_into_what_the_config_reads_are_a_loop() -> None:
    with pytest.raises(MirrorLoopError) as caught:  # offline: a regex whose copies keep their names
        on_destination_cluster({"name": "a", "cluster": "dr", "topic-regex": "orders.*"})
    assert (caught.value.index, caught.value.selected_by) == (0, 0)
    assert "writes it into itself: a loop" in str(caught.value)

    with pytest.raises(MirrorLoopError) as caught:  # offline: a named topic copied into a topic a regex reads
        on_destination_cluster(
            {"name": "a", "cluster": "dr", "topics": ["orders"], "destination-name": {"prefix": "copy-"}},
            {"name": "b", "cluster": "dr", "topic-regex": "copy-.*", "destination-name": {"prefix": "x-"}},
        )
    assert (caught.value.topic, caught.value.destination, caught.value.selected_by) == ("orders", "copy-orders", 1)

    # online: a regex on the destination cluster whose copies it would select again
    entries = compile_entries(
        on_destination_cluster(
            {"name": "a", "cluster": "dr", "topic-regex": "ord.*", "destination-name": {"prefix": "ord-"}}
        )
    )
    with pytest.raises(MirrorLoopError) as caught:
        expand(entries, {"dr": {"orders": 1}})
    assert (caught.value.topic, caught.value.destination) == ("orders", "ord-orders")

    # copies that nothing reads again, and mirrors from another cluster, are fine
    fine = on_destination_cluster(
        {"name": "a", "cluster": "dr", "topic-regex": "orders", "destination-name": {"prefix": "copy-"}},
        {"name": "b", "cluster": "prod", "topic-regex": "orders"},
    )
    assert keys(expand(compile_entries(fine), METADATA)) == [
        ("dr", "orders", 0),
        ("dr", "orders", 1),
        *[("prod", "orders", p) for p in range(4)],
    ]
