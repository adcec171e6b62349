"""The restore config: its example parses and matches the committed schema; mistakes name their field path."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from config.errors import ConfigError, format_path
from config.restore import parse_restore_config
from tools.generated import RESTORE_SCHEMA

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples" / "restore").glob("*.yaml"))
BASE = """
archive: {type: filesystem, root: /archive}
destination: {type: kafka, bootstrap-servers: "k:9092", offsets: renumber}
"""


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_examples_parse_and_match_the_schema(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0].endswith("schemas/mirror-v3.restore.schema.json")
    config = parse_restore_config(text, env={"KAFKA_BOOTSTRAP": "k:9092"})
    assert config.restore
    jsonschema.Draft202012Validator(json.loads(RESTORE_SCHEMA.path.read_text())).validate(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("[{topic: a, topics: [b]}]", "restore[0]: set exactly one of topic, topics, topic-regex (found topic, topics"),
        ("[{partitions: [0]}]", "restore[0]: set exactly one of topic, topics, topic-regex (found none)"),
        ("[{topic-regex: 'a('}]", "restore[0].topic-regex: not a regular expression"),
        ("[{topics: [a, b], rename: c}]", "restore[0].rename: several topics would share one name"),
        ("[{topic: a, rename: 'a b'}]", "restore[0].rename: invalid topic 'a b'"),
        ("[{topic: a, from-offset: 5, to-offset: 5}]", "restore[0].to-offset: must be above from-offset 5"),
        ("[{topic: a, form-offset: 5}]", "restore[0].form-offset: unknown field"),
        (
            "[{topic: a, from-timestamp: 2026-01-02T00:00:00Z, to-timestamp: 1767225600000}]",
            "restore[0].to-timestamp: must be later than from-timestamp (1767312000000 ms)",
        ),
        ("[{topic: a, from-timestamp: '2026-01-02 10:00'}]", "restore[0].from-timestamp: "),
        ("[{topic: a, to-timestamp: -1}]", "restore[0].to-timestamp: "),
        ("[]", "restore: "),
    ],
)
def test_mistakes_name_their_field(entries: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_restore_config(BASE + f"restore: {entries}\n", env={})
    field, problem = message.split(": ", 1)
    assert caught.value.path is not None and format_path(caught.value.path) == field, caught.value
    assert caught.value.problem.startswith(problem), caught.value.problem


def test_rename_puts_the_archived_name_in_place_of_topic() -> None:
    config = parse_restore_config(BASE + "restore: [{topic-regex: 'o-.*', rename: 'back-{topic}'}]\n", env={})
    assert config.restore[0].destination_topic("o-eu") == "back-o-eu"


def test_a_restore_may_create_its_topics_from_the_archives_metadata() -> None:
    text = BASE.replace("offsets: renumber}", "offsets: renumber, create-topics: true}") + "restore: [{topic: a}]\n"
    assert parse_restore_config(text, env={}).destination.create_topics  # (commands.restore_topics)


def test_timestamps_are_epoch_milliseconds_or_times_with_a_zone() -> None:
    entries = "[{topic: a, from-timestamp: 2026-01-01T01:00:00+01:00, to-timestamp: 1767225600001}]"
    entry = parse_restore_config(BASE + f"restore: {entries}\n", env={}).restore[0]
    assert (entry.from_timestamp_ms, entry.to_timestamp_ms) == (1_767_225_600_000, 1_767_225_600_001)
