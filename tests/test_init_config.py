"""`init`'s starting config: what it writes for each kind of destination loads as a config, and so does every
commented setting in it once uncommented (the file teaches its own format, so it must not teach a wrong key)."""

from __future__ import annotations

import re

import pytest

from commands.init_config import DEFAULT_TOPICS, Destination, starting_config
from config import ConfigError, parse_config
from config.model import FilesystemDestination, KafkaDestination, S3Destination

KINDS = [
    ("./mirror-data", FilesystemDestination, "./mirror-data"),
    ("file:///data/archive", FilesystemDestination, "/data/archive"),
    ("s3://my-archive/prod/kafka", S3Destination, "my-archive"),
    ("s3://my-archive", S3Destination, "my-archive"),
    ("kafka://dr-1:9092,dr-2:9092", KafkaDestination, "dr-1:9092,dr-2:9092"),
]


def uncommented(text: str) -> str:
    """Every commented setting turned on: `  # key: value` (and its nested lines) becomes `  key: value`."""
    return re.sub(r"^(\s+)# (\s*[a-z][a-z-]*:)", r"\1\2", text, flags=re.MULTILINE)


@pytest.mark.parametrize(("given", "kind", "where"), KINDS)
def test_each_destination_gives_a_config_that_loads_with_every_comment_turned_on(
    given: str, kind: type, where: str
) -> None:
    text = starting_config("kafka-1:9092,kafka-2:9092", Destination.parse(given), "orders\\..*")
    config = parse_config(text)
    assert isinstance(config.destination, kind)
    found = getattr(config.destination, "root", None) or getattr(config.destination, "bucket", None)
    assert (found or config.destination.bootstrap_servers) == where  # type: ignore[union-attr]
    (entry,) = config.mirrors
    assert entry.cluster == "source" and entry.topic_regex == "orders\\..*"
    assert config.clusters["source"].bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    everything = uncommented(text)
    assert everything != text
    parse_config(everything, env={"SOURCE_KAFKA_PASSWORD": "x"})
    if kind is S3Destination and "/" in given.removeprefix("s3://"):
        assert config.destination.prefix == "prod/kafka"  # type: ignore[union-attr]


def test_by_default_every_application_topic_is_selected() -> None:
    config = parse_config(starting_config("k:9092", Destination.parse("./d")))
    assert config.mirrors[0].topic_regex == DEFAULT_TOPICS
    assert re.fullmatch(DEFAULT_TOPICS, "orders") and not re.fullmatch(DEFAULT_TOPICS, "__consumer_offsets")


@pytest.mark.parametrize(
    ("bootstrap", "destination", "topics", "named"),
    [
        ("k:9092", "s3://", ".*", "--destination"),
        ("k:9092", "kafka://dr", ".*", "--destination"),
        ("k:9092", "gs://bucket", ".*", "--destination"),
        ("k", "./d", ".*", "--bootstrap-servers"),
        ("k:9092", "./d", "orders[", "--topics"),
    ],
)
def test_what_cannot_be_written_is_named(bootstrap: str, destination: str, topics: str, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        starting_config(bootstrap, Destination.parse(destination), topics)
    assert refused.value.where == named
