"""`client-properties`: a cluster's pass-through map reaches its librdkafka clients (the task consumer and
producer, the admin client); a key mirror-v3 owns, or one librdkafka refuses, is one config error naming it."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError, parse_config
from config.errors import format_path
from config.estate import MirrorSpec
from config.model import FlushConfig, KafkaDestination, KafkaSecurity, SaslConfig
from config.restore import parse_restore_config
from kafka_clients.admin import destination_admin
from kafka_clients.property_check import librdkafka_refusal
from kafka_clients.settings import librdkafka_properties
from sinks.kafka.destination import kafka_settings
from source import range_reader
from workers.partition_source import source_partition

CONFIG = """
destination:
  type: kafka
  bootstrap-servers: dest:9092
  client-properties: {destination}
clusters:
  prod:
    bootstrap-servers: src:9092
    client-properties: {source}
mirrors:
  - {{name: m, cluster: prod, topic: t, partition: 0}}
  - name: n
    source: {{bootstrap-servers: "other:9092", client-properties: {single}}}
    topic: u
    partition: 0
"""


def _config(source: str = "{}", destination: str = "{}", single: str = "{}") -> Any:
    text = CONFIG.format(source=source, destination=destination, single=single)
    return parse_config(text, env={}, library_check=librdkafka_refusal)


def test_a_source_clusters_properties_reach_the_task_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(source="{fetch.max.bytes: 1048576, socket.keepalive.enable: true, client.rack: eu-1a}")
    source = config.clusters["prod"]
    mirror = MirrorSpec("m", 0, "prod", source, "clusters.prod", "t", 0, "t", FlushConfig())
    partition = source_partition(mirror)
    assert partition.client_properties == {
        "fetch.max.bytes": "1048576",
        "socket.keepalive.enable": "true",
        "client.rack": "eu-1a",
        "security.protocol": "plaintext",
    }
    made: list[dict[str, Any]] = []
    monkeypatch.setattr("confluent_kafka.Consumer", lambda settings: made.append(settings))
    range_reader._new_consumer(partition)
    assert made[0]["fetch.max.bytes"] == "1048576"  # the user's value over the reader's own default
    assert made[0]["isolation.level"] == "read_committed"


def test_the_destinations_properties_reach_its_producer_and_admin_client(monkeypatch: pytest.MonkeyPatch) -> None:
    destination = _config(destination="{linger.ms: 20, client.id: archive}").destination
    assert isinstance(destination, KafkaDestination)
    properties = kafka_settings(destination).client_properties  # what the tasks' producers are made with
    assert (properties["linger.ms"], properties["client.id"]) == ("20", "archive")
    made: list[dict[str, Any]] = []
    monkeypatch.setattr("kafka_clients.admin.AdminClient", lambda settings: made.append(settings))
    destination_admin(destination)
    assert (made[0]["linger.ms"], made[0]["bootstrap.servers"]) == ("20", "dest:9092")


def test_the_security_block_wins_over_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loader refuses such keys; this is the second line of defence if a caller forgets to check.
    monkeypatch.setenv("P", "secret")
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT", sasl=SaslConfig(mechanism="PLAIN", username="u", password_env="P")
    )
    properties = librdkafka_properties(security, "f", {"sasl.username": "other", "fetch.min.bytes": 1})
    assert (properties["sasl.username"], properties["fetch.min.bytes"]) == ("u", "1")


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("isolation.level", "set isolation-level instead"),
        ("group.id", "set group-id instead"),
        ("enable.auto.commit", "never commits to a source group"),
        ("auto.offset.reset", "ranges are read exactly"),
        ("enable.partition.eof", "ranges are read exactly"),
        ("bootstrap.servers", "set bootstrap-servers instead"),
        ("security.protocol", "set security.protocol instead"),
        ("sasl.password", "set security.sasl instead"),
        ("SSL.Key.Pem", "set security.tls instead"),
        ("oauth_cb", "a callback"),
    ],
)
def test_a_key_the_product_owns_is_refused_on_a_source(key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(source=f'{{"{key}": x}}')
    field = format_path(("clusters", "prod", "client-properties", key))
    message = str(caught.value)
    assert message.startswith(f"{field}: ") and message.endswith(" (line 9)") and reason in message


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("enable.idempotence", "exactly-once producer"),
        ("transactional.id", "set transaction-id-prefix instead"),
        ("acks", "exactly-once producer"),
        ("isolation.level", "the destination is read committed"),
        ("group.id", "renumber keeps its position"),
        ("compression.type", "set compression instead"),
        ("message.timeout.ms", "set retry.deadline-ms instead"),
    ],
)
def test_a_key_the_product_owns_is_refused_on_the_destination(key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(destination=f"{{{key}: x}}")
    assert caught.value.path == ("destination", "client-properties", key) and reason in caught.value.problem


def test_a_single_entrys_source_is_checked_too() -> None:
    with pytest.raises(ConfigError) as caught:
        _config(single="{auto.offset.reset: earliest}")
    assert caught.value.path == ("mirrors", 1, "source", "client-properties", "auto.offset.reset")


@pytest.mark.parametrize(
    ("properties", "key", "problem"),
    [
        ("{fetch.max.bites: 3}", "fetch.max.bites", "librdkafka refuses it: No such configuration property"),
        ("{fetch.max.bytes: lots}", "fetch.max.bytes", "librdkafka refuses it: Invalid value"),
    ],
)
def test_names_and_values_librdkafka_refuses_are_config_errors(properties: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(source=properties)
    assert caught.value.path == ("clusters", "prod", "client-properties", key)
    assert caught.value.problem.startswith(problem)


def test_a_restore_destination_is_checked_too() -> None:
    text = """
archive: {type: filesystem, root: /a}
restore: [{topic: t}]
destination:
  type: kafka
  bootstrap-servers: dest:9092
  client-properties: {transactional.id: mine}
"""
    with pytest.raises(ConfigError) as caught:
        parse_restore_config(text, env={}, library_check=librdkafka_refusal)
    assert caught.value.path == ("destination", "client-properties", "transactional.id")
