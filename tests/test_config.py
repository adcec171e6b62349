"""Config loading: every bad config names the exact field path; env substitution; examples; schema."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from commands.config_files import load_config
from config import Config, ConfigError, FlushConfig, SourceConfig, SparkConfig, parse_config
from config.errors import ConfigErrors, YamlSyntaxError, format_path
from config.estate import compile_entries
from config.model import FilesystemDestination, KafkaDestination, MirrorConfig
from tools.generated import CONFIG_SCHEMA

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
SCHEMA_COMMENT = "# yaml-language-server: $schema=../schemas/mirror-v3.config.schema.json"

BASE: dict[str, Any] = {
    "destination": {"type": "filesystem", "root": "/data/mirror"},
    "mirrors": [
        {"name": "orders-0", "source": {"bootstrap-servers": "kafka:9092"}, "topic": "orders", "partition": 0},
        {"name": "orders-1", "source": {"bootstrap-servers": "kafka:9092"}, "topic": "orders", "partition": 1},
    ],
}


def config_text(mutate: Callable[[dict[str, Any]], object] | None = None) -> str:
    """BASE as YAML, after `mutate` edited a deep copy of it in place."""
    data = copy.deepcopy(BASE)
    if mutate is not None:
        mutate(data)
    return yaml.safe_dump(data, sort_keys=False)


def mirror(index: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda data: data["mirrors"][index]  # type: ignore[no-any-return]


def set_in(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        node[path[-1]] = value

    return mutate


def delete(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def add_mirror(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        entry = {"name": "extra", "source": {"bootstrap-servers": "kafka:9092"}, "topic": "orders", "partition": 7}
        entry.update({key.replace("_", "-"): value for key, value in fields.items()})
        data["mirrors"].append(entry)

    return mutate


# (id, YAML text, the exact start of the message: the field path and ": ")
BAD_FIELD_CONFIGS: list[tuple[str, str, str]] = [
    ("missing-partition", config_text(delete("mirrors", 1, "partition")), "mirrors[1].partition: "),
    ("negative-partition", config_text(set_in("mirrors", 1, "partition", value=-1)), "mirrors[1].partition: "),
    ("partition-as-string", config_text(set_in("mirrors", 0, "partition", value="3")), "mirrors[0].partition: "),
    ("partition-not-a-number", config_text(set_in("mirrors", 0, "partition", value="abc")), "mirrors[0].partition: "),
    ("partition-bool", config_text(set_in("mirrors", 0, "partition", value=True)), "mirrors[0].partition: "),
    ("partition-float", config_text(set_in("mirrors", 0, "partition", value=1.5)), "mirrors[0].partition: "),
    ("partition-beyond-int32", config_text(set_in("mirrors", 0, "partition", value=2**31)), "mirrors[0].partition: "),
    ("unknown-top-level-key", config_text(set_in("destinations", value=[])), "destinations: "),
    ("unknown-key-in-mirror", config_text(set_in("mirrors", 1, "replicas", value=2)), "mirrors[1].replicas: "),
    (
        "unknown-key-in-source",
        config_text(set_in("mirrors", 0, "source", "sasl-mechanism", value="PLAIN")),
        "mirrors[0].source.sasl-mechanism: ",
    ),
    (
        "snake-case-key",
        config_text(set_in("mirrors", 0, "source", "poll_interval_ms", value=100)),
        "mirrors[0].source.poll_interval_ms: ",
    ),
    (
        "unknown-key-in-flush",
        config_text(set_in("destination", "flush", "max-records", value=10)),
        "destination.flush.max-records: ",
    ),
    ("unknown-key-in-spark", config_text(set_in("spark", "cores", value=4)), "spark.cores: "),
    ("bad-destination-type", config_text(set_in("destination", "type", value="s3x")), "destination.type: "),
    ("destination-type-not-a-string", config_text(set_in("destination", "type", value=1)), "destination.type: "),
    ("missing-destination-type", config_text(delete("destination", "type")), "destination.type: "),
    ("missing-destination", config_text(delete("destination")), "destination: "),
    ("destination-not-a-mapping", config_text(set_in("destination", value="/data")), "destination: "),
    ("missing-root", config_text(delete("destination", "root")), "destination.root: "),
    ("empty-root", config_text(set_in("destination", "root", value="")), "destination.root: "),
    (
        "flush-max-time-ms-zero",
        config_text(set_in("destination", "flush", "max-time-ms", value=0)),
        "destination.flush.max-time-ms: ",
    ),
    (
        "flush-max-bytes-wrong-type",
        config_text(set_in("destination", "flush", "max-bytes", value="128MiB")),
        "destination.flush.max-bytes: ",
    ),
    (
        "flush-max-offsets-negative",
        config_text(set_in("destination", "flush", "max-offsets", value=-5)),
        "destination.flush.max-offsets: ",
    ),
    ("bad-compression", config_text(set_in("destination", "compression", value="brotli")), "destination.compression: "),
    (
        "compression-level-for-snappy",
        config_text(
            lambda d: d["destination"].update({"compression": "snappy", "compression-level": 3}),
        ),
        "destination.compression-level: ",
    ),
    (
        "gzip-level-out-of-range",
        config_text(lambda d: d["destination"].update({"compression": "gzip", "compression-level": 12})),
        "destination.compression-level: ",
    ),
    ("duplicate-mirror-names", config_text(set_in("mirrors", 1, "name", value="orders-0")), "mirrors[1].name: "),
    ("same-topic-and-partition", config_text(set_in("mirrors", 1, "partition", value=0)), "mirrors[1]: "),
    (
        "destination-name-override-collision",
        config_text(add_mirror(topic="orders-v2", partition=1, destination_name_override="orders")),
        "mirrors[2]: ",
    ),
    (
        "two-overrides-collide",
        config_text(
            lambda d: (
                d["mirrors"][0].update({"topic": "a", "destination-name-override": "shared"}),
                d["mirrors"][1].update({"topic": "b", "partition": 0, "destination-name-override": "shared"}),
            )
        ),
        "mirrors[1]: ",
    ),
    ("empty-mirrors-list", config_text(set_in("mirrors", value=[])), "mirrors: "),
    ("missing-mirrors", config_text(delete("mirrors")), "mirrors: "),
    ("mirrors-not-a-list", config_text(set_in("mirrors", value={"name": "x"})), "mirrors: "),
    ("mirror-not-a-mapping", config_text(set_in("mirrors", 1, value="orders-1")), "mirrors[1]: "),
    ("missing-source", config_text(delete("mirrors", 0, "source")), "mirrors[0].source: "),
    (
        "missing-bootstrap-servers",
        config_text(delete("mirrors", 1, "source", "bootstrap-servers")),
        "mirrors[1].source.bootstrap-servers: ",
    ),
    (
        "bad-isolation-level",
        config_text(set_in("mirrors", 0, "source", "isolation-level", value="committed")),
        "mirrors[0].source.isolation-level: ",
    ),
    (
        "bad-on-data-loss",
        config_text(set_in("mirrors", 1, "source", "on-data-loss", value="ignore")),
        "mirrors[1].source.on-data-loss: ",
    ),
    (
        "poll-interval-too-small",
        config_text(set_in("mirrors", 0, "source", "poll-interval-ms", value=1)),
        "mirrors[0].source.poll-interval-ms: ",
    ),
    ("mirror-name-with-space", config_text(set_in("mirrors", 1, "name", value="orders 1")), "mirrors[1].name: "),
    ("mirror-name-with-slash", config_text(set_in("mirrors", 0, "name", value="orders/0")), "mirrors[0].name: "),
    ("mirror-name-leading-dash", config_text(set_in("mirrors", 0, "name", value="-orders")), "mirrors[0].name: "),
    ("mirror-name-line-break", config_text(set_in("mirrors", 0, "name", value="orders\n")), "mirrors[0].name: "),
    (
        "destination-name-override-with-slash",
        config_text(set_in("mirrors", 1, "destination-name-override", value="a/b")),
        "mirrors[1].destination-name-override: ",
    ),
    (
        "destination-name-override-dotdot",
        config_text(set_in("mirrors", 1, "destination-name-override", value="..")),
        "mirrors[1].destination-name-override: ",
    ),
    ("topic-climbs-out", config_text(set_in("mirrors", 0, "topic", value="../etc")), "mirrors[0].topic: "),
    ("topic-unquoted-number", config_text(set_in("mirrors", 0, "topic", value=123)), "mirrors[0].topic: "),
    ("topic-null", config_text(set_in("mirrors", 0, "topic", value=None)), "mirrors[0].topic: "),
    (
        "undefined-env-variable",
        config_text(set_in("mirrors", 1, "source", "bootstrap-servers", value="${MIRROR_TEST_UNSET}")),
        "mirrors[1].source.bootstrap-servers: ",
    ),
    (
        "malformed-env-reference",
        config_text(set_in("destination", "root", value="/data/${ROOT")),
        "destination.root: ",
    ),
    (
        "env-reference-of-wrong-type",
        config_text(set_in("mirrors", 0, "partition", value="${MIRROR_TEST_WORD}")),
        "mirrors[0].partition: ",
    ),
    (
        "spark-conf-unquoted-number",
        config_text(set_in("spark", "conf", "spark.sql.shuffle.partitions", value=8)),
        'spark.conf["spark.sql.shuffle.partitions"]: ',
    ),
    ("bad-spark-log-level", config_text(set_in("spark", "log-level", value="TRACE")), "spark.log-level: "),
    (
        "duplicate-yaml-key",
        "destination: {type: filesystem, root: /d}\n"
        "mirrors:\n"
        "  - name: a\n"
        "    source: {bootstrap-servers: k:9092}\n"
        "    topic: t\n"
        "    partition: 0\n"
        "    partition: 1\n",
        "mirrors[0].partition: ",
    ),
    ("non-string-key", config_text() + "1: one\n", "<root>: "),
]


@pytest.mark.parametrize(("text", "prefix"), [c[1:] for c in BAD_FIELD_CONFIGS], ids=[c[0] for c in BAD_FIELD_CONFIGS])
def test_bad_config_names_the_field(text: str, prefix: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={"MIRROR_TEST_WORD": "three"})
    message = str(caught.value)
    assert message.startswith(prefix), message
    assert len(message) > len(prefix) + 5, message  # says what is wrong, not just where
    assert "\n" not in message, message


def test_at_least_fifteen_distinct_bad_configs() -> None:
    assert len({text for _, text, _ in BAD_FIELD_CONFIGS}) >= 15


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("destination: {type: filesystem, root: /d}\nmirrors:\n  - {name: a\n    topic: [\n", "<config> line 4 "),
        ("destination:\n\ttype: filesystem\n", "<config> line 2 "),
        ("a: 1\n---\nb: 2\n", "<config> line 2 "),
        ("- destination\n- mirrors\n", "<config>: top level must be a mapping"),
        ("just a string\n", "<config>: top level must be a mapping"),
        ("", "<config>: config file is empty"),
        ("# only a comment\n", "<config>: config file is empty"),
        ("x: " + "[" * 5000 + "]" * 5000 + "\n", "<config>: invalid YAML: nested too deeply"),
    ],
    ids=[
        "yaml-syntax",
        "tab-indent",
        "two-documents",
        "top-level-list",
        "top-level-scalar",
        "empty",
        "comment-only",
        "nested-too-deeply",
    ],
)
def test_document_level_errors_name_the_source(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={})
    assert str(caught.value).startswith(expected), str(caught.value)


def test_messages_explain_the_problem() -> None:
    def message(text: str, env: dict[str, str] | None = None) -> str:
        with pytest.raises(ConfigError) as caught:
            parse_config(text, env=env or {})
        return str(caught.value)

    assert message(config_text(delete("mirrors", 1, "partition"))) == (
        "mirrors[1].partition: required with `topic` (for every partition, write topics: [orders]) (line 10)"
    )
    assert message(config_text(set_in("mirrors", 1, "partition", value=-1))) == (
        "mirrors[1].partition: Expected int >= 0, got -1 (line 14)"
    )
    assert "expected one of: read_committed, read_uncommitted" in message(
        config_text(set_in("mirrors", 0, "source", "isolation-level", value="x"))
    )
    assert "expected one of: filesystem" in message(config_text(delete("destination", "type")))
    assert "environment variable MIRROR_TEST_UNSET is not set" in message(
        config_text(set_in("destination", "root", value="${MIRROR_TEST_UNSET}"))
    )
    unknown = message(config_text(set_in("mirrors", 0, "source", "bootstrap_servers", value="k")))
    assert unknown.startswith("mirrors[0].source.bootstrap_servers: unknown field; keys are kebab-case: did you mean")
    unknown = message(config_text(set_in("mirrors", 0, "source", "sasl-mechanism", value="PLAIN")))
    assert unknown.startswith("mirrors[0].source.sasl-mechanism: unknown field; expected one of: bootstrap-servers,")
    assert "quote the value" in message(config_text(set_in("mirrors", 0, "topic", value=123)))
    assert "duplicate mirror name 'orders-0' (also mirrors[0])" in message(
        config_text(set_in("mirrors", 1, "name", value="orders-0"))
    )
    twice = message(config_text(set_in("mirrors", 1, "partition", value=0)))
    assert twice.startswith("mirrors[1]: destination orders/0: mirrors[1] (kafka:9092: orders-0) and mirrors[0]")
    assert "selected twice" in twice


# --------------------------------------------------------------------------------- valid configs


def test_defaults() -> None:
    config = parse_config(config_text(), env={})
    assert isinstance(config, Config)
    assert config.destination.flush == FlushConfig()
    assert config.destination.flush.max_time_ms == 10_000
    assert config.destination.flush.max_bytes == 128 * 1024 * 1024
    assert config.destination.flush.max_offsets == 1_000_000
    assert config.destination.compression == "zstd"
    assert not isinstance(config.destination, KafkaDestination)
    assert config.destination.compression_level is None
    assert config.spark == SparkConfig()
    assert config.spark.master == "local[*]"
    source = config.mirrors[0].source
    assert source == SourceConfig(bootstrap_servers="kafka:9092")
    assert (source.group_id, source.isolation_level, source.on_data_loss) == (None, "read_committed", "fail")
    assert (source.poll_interval_ms, source.request_timeout_ms) == (500, 30_000)
    assert config.mirrors[1].destination_name_override is None
    assert compile_entries(config)[1].destination_name("orders") == "orders"


def test_kebab_case_keys_fill_every_field() -> None:
    text = """
destination:
  type: filesystem
  root: /d
  compression: gzip
  compression-level: 6
  flush: {max-time-ms: 1, max-bytes: 2, max-offsets: 3}
mirrors:
  - name: m.1_x-y
    source:
      bootstrap-servers: a:1,b:2
      group-id: g
      isolation-level: read_uncommitted
      on-data-loss: skip
      poll-interval-ms: 10
      request-timeout-ms: 100
    topic: t
    partition: 2147483647
    destination-name-override: renamed
spark:
  master: spark://h:7077
  max-offsets-per-job: 4
  offsets-per-task: 5
  log-level: WARN
  conf: {spark.driver.memory: 2g}
"""
    config = parse_config(text, env={})
    assert config.destination.flush == FlushConfig(max_time_ms=1, max_bytes=2, max_offsets=3)
    assert not isinstance(config.destination, KafkaDestination)
    assert (config.destination.compression, config.destination.compression_level) == ("gzip", 6)
    mirror = config.mirrors[0]
    assert mirror.source == SourceConfig(
        bootstrap_servers="a:1,b:2",
        group_id="g",
        isolation_level="read_uncommitted",
        on_data_loss="skip",
        poll_interval_ms=10,
        request_timeout_ms=100,
    )
    assert (mirror.partition, compile_entries(config)[0].destination_name(mirror.topic or "")) == (2**31 - 1, "renamed")
    assert config.spark == SparkConfig(
        master="spark://h:7077",
        max_offsets_per_job=4,
        offsets_per_task=5,
        log_level="WARN",
        conf={"spark.driver.memory": "2g"},
    )


def test_env_substitution() -> None:
    text = config_text(
        lambda d: (
            d["destination"].update({"root": "${ROOT:-/var/lib/mirror}", "compression-level": "${LEVEL:-5}"}),
            d["mirrors"][0]["source"].update(
                {"bootstrap-servers": "${HOST}:${PORT}", "group-id": "${GROUP}", "poll-interval-ms": "${POLL}"}
            ),
            d["mirrors"][0].update({"partition": "${P}", "topic": "${TOPIC}"}),
            d["mirrors"][1].update({"partition": "${P1:-1}"}),
            d.update({"spark": {"conf": {"spark.x": "$${KEEP}", "spark.y": "${EMPTY}"}}}),
        )
    )
    env = {"HOST": "kafka", "PORT": "9093", "GROUP": "007", "POLL": "250", "P": "3", "TOPIC": "123", "EMPTY": ""}
    config = parse_config(text, env=env)
    assert _root(config) == "/var/lib/mirror"  # unset: default
    assert not isinstance(config.destination, KafkaDestination)
    assert config.destination.compression_level == 5  # default of a whole reference takes the field's type
    first, second = config.mirrors
    assert src(first).bootstrap_servers == "kafka:9093"
    assert first.partition == 3 and isinstance(first.partition, int)
    assert src(first).poll_interval_ms == 250
    assert src(first).group_id == "007"  # a str field keeps the text, leading zero and all
    assert first.topic == "123"
    assert second.partition == 1
    assert config.spark.conf == {"spark.x": "${KEEP}", "spark.y": ""}


def test_env_default_applies_to_empty_variable_and_set_value_wins() -> None:
    text = config_text(set_in("destination", "root", value="${ROOT:-/fallback}"))
    assert _root(parse_config(text, env={"ROOT": ""})) == "/fallback"
    assert _root(parse_config(text, env={"ROOT": "/set"})) == "/set"


def test_env_defaults_to_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_TEST_BOOTSTRAP", "broker:9092")
    text = config_text(set_in("mirrors", 0, "source", "bootstrap-servers", value="${MIRROR_TEST_BOOTSTRAP}"))
    assert src(parse_config(text).mirrors[0]).bootstrap_servers == "broker:9092"


def test_env_is_not_substituted_in_keys_or_comments() -> None:
    text = "# ${NOT_A_VAR}\n" + config_text()
    assert _root(parse_config(text, env={})) == "/data/mirror"


def src(mirror: MirrorConfig) -> SourceConfig:
    assert mirror.source is not None
    return mirror.source


def test_merge_key_mirror() -> None:
    text = """
destination: {type: filesystem, root: /d}
mirrors:
  - &first {name: a, source: {bootstrap-servers: "k:9092", on-data-loss: skip}, topic: t, partition: 0}
  - <<: *first
    name: b
    partition: 1
"""
    a, b = parse_config(text, env={}).mirrors
    assert (b.name, b.topic, b.partition, src(b).on_data_loss) == ("b", "t", 1, "skip")
    assert a.source == b.source


def test_recursive_alias_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text() + "x: &a [*a]\n", env={})
    assert (caught.value.path, caught.value.problem) == (("x", 0), "recursive YAML alias")


def test_null_optional_fields_are_accepted() -> None:
    text = config_text(
        lambda d: (
            d["mirrors"][0]["source"].update({"group-id": None}),
            d["mirrors"][0].update({"destination-name-override": None}),
        )
    )
    assert compile_entries(parse_config(text, env={}))[0].destination_name("orders") == "orders"


# ----------------------------------------------------------------------------------- load_config


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(config_text(), encoding="utf-8")
    assert len(load_config(path).mirrors) == 2
    assert len(load_config(str(path)).mirrors) == 2


def test_load_config_names_the_file_on_yaml_errors(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("destination: [\n", encoding="utf-8")
    with pytest.raises(YamlSyntaxError) as caught:
        load_config(path)
    assert (caught.value.file, caught.value.at) == (str(path), (2, 1))
    assert str(caught.value).startswith(f"{path} line 2 column 1: invalid YAML: ")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p / "absent.yaml", "config file not found"),
        (lambda p: p, "is a directory"),
        (lambda p: (p / "latin1.yaml", (p / "latin1.yaml").write_bytes(b"root: caf\xe9\n"))[0], "not UTF-8"),
    ],
    ids=["missing", "directory", "not-utf8"],
)
def test_unreadable_files(tmp_path: Path, make: Callable[[Path], Path], expected: str) -> None:
    path = make(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: "), str(caught.value)
    assert expected in str(caught.value)


# -------------------------------------------------------------------------------- examples/schema


def test_there_are_examples() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"kafka-to-filesystem.yaml", "minimal.yaml"} <= names, names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_parses_without_environment(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == SCHEMA_COMMENT
    schema_ref = SCHEMA_COMMENT.split("$schema=", 1)[1]
    assert (path.parent / schema_ref).resolve() == CONFIG_SCHEMA.path
    config = parse_config(text, source=str(path), env={})
    assert config.mirrors


def test_production_example_mirrors_three_partitions() -> None:
    config = load_config(REPO / "examples" / "kafka-to-filesystem.yaml")
    assert [(m.topic, m.partition) for m in config.mirrors] == [("payments", 0), ("payments", 1), ("payments", 2)]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_matches_committed_schema(path: Path) -> None:
    schema = json.loads(CONFIG_SCHEMA.path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def test_schema_rejects_what_the_loader_rejects() -> None:
    schema = json.loads(CONFIG_SCHEMA.path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(yaml.safe_load(config_text()))
    for mutate in (
        delete("mirrors", 0, "partition"),
        set_in("mirrors", 0, "partition", value=-1),
        set_in("mirrors", 0, "topic", value=".."),
        set_in("mirrors", 0, "destination-name-override", value="a/b"),
        set_in("mirrors", 0, "extra", value=1),
        set_in("destination", "type", value="s3x"),
        set_in("mirrors", value=[]),
        delete("destination", "type"),
    ):
        assert not validator.is_valid(yaml.safe_load(config_text(mutate)))


def _root(config: Config) -> str:
    assert isinstance(config.destination, FilesystemDestination)
    return config.destination.root


def test_configuration_reference_lists_every_schema_key() -> None:
    from config import reference

    text = reference.render()
    schema = json.loads(CONFIG_SCHEMA.path.read_text(encoding="utf-8"))
    for name, definition in schema["$defs"].items():
        for key in definition.get("properties", {}):
            # Top-level keys start a path; every other key follows a dot and ends a path or continues it.
            pattern = rf"`{key}[.\[`]" if name == "Config" else rf"\.{re.escape(key)}[`.]"
            assert re.search(pattern, text), f"{name}.{key} missing from the configuration reference"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]", "spark://a:7077,b:7077", "k8s://h"])
def test_spark_masters_this_process_can_drive_are_accepted(master: str) -> None:
    assert parse_config(config_text(set_in("spark", value={"master": master})), env={}).spark.master == master


@pytest.mark.parametrize(
    ("master", "says"),
    [
        ("sc://connect:15002", "Spark Connect (sc://connect:15002) is not supported"),
        ("spark://host", "is not a Spark master this process can use"),
        ("yarn", "is not a Spark master this process can use"),
        ("local[0]", "is not a Spark master this process can use"),
    ],
)
def test_unusable_spark_masters_are_refused_naming_the_field(master: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text(set_in("spark", value={"master": master})), env={})
    message = str(caught.value)
    assert message.startswith("spark.master: ") and says in message and message.endswith(")"), message


SCHEMA_CONFIG = """
clusters:
  prod: {bootstrap-servers: "k:9092", schema-registry: {url: "http://registry:8081"}}
destination:
  type: kafka
  bootstrap-servers: "d:9092"
  schema-registry: {url: "https://dr-registry", bearer-token-env: DR_TOKEN, tls: {ca-file: /ca.pem}}
mirrors:
  - {name: orders, cluster: prod, topics: [orders], schemas: {value: lenient, subject-name-strategy: topic-record}}
"""


def test_schema_registry_mirroring_needs_the_registries_it_copies_between() -> None:
    config = parse_config(SCHEMA_CONFIG)
    # An archive keeps the source's schemas: only the source registry is needed.
    archive = (
        "destination: {type: filesystem, root: /d}\n"
        + SCHEMA_CONFIG.split("destination:")[0]
        + "mirrors:"
        + SCHEMA_CONFIG.split("mirrors:")[1]
    )
    assert parse_config(archive).mirrors[0].schemas is not None
    schemas = config.mirrors[0].schemas
    assert schemas is not None and (schemas.key, schemas.value, schemas.subject_name_strategy) == (
        "off",
        "lenient",
        "topic-record",
    )
    cases = [
        (
            SCHEMA_CONFIG.replace(', schema-registry: {url: "http://registry:8081"}', ""),
            "clusters.prod.schema-registry",
        ),
        (
            SCHEMA_CONFIG.replace(
                '  schema-registry: {url: "https://dr-registry", bearer-token-env: DR_TOKEN, '
                "tls: {ca-file: /ca.pem}}\n",
                "",
            ),
            "destination.schema-registry",
        ),
        (
            SCHEMA_CONFIG.replace("bearer-token-env: DR_TOKEN", "username: u"),
            "destination.schema-registry.password-env",
        ),
        (SCHEMA_CONFIG.replace("https://dr-registry", "http://dr-registry"), "destination.schema-registry.tls"),
        (SCHEMA_CONFIG.replace("value: lenient", "value: exact"), "mirrors[0].schemas.value"),
        (archive.replace(', schema-registry: {url: "http://registry:8081"}', ""), "clusters.prod.schema-registry"),
    ]
    for text, field in cases:
        with pytest.raises(ConfigError) as caught:
            parse_config(text)
        assert str(caught.value).startswith(f"{field}: "), (field, str(caught.value))
    off = SCHEMA_CONFIG.replace("value: lenient", "value: off").replace(
        ', schema-registry: {url: "http://registry:8081"}', ""
    )
    assert parse_config(off).mirrors[0].schemas is not None  # off everywhere: no registry needed


def test_a_near_miss_gets_a_did_you_mean_and_what_is_refused_on_purpose_says_what_to_use() -> None:
    def message(text: str) -> str:
        with pytest.raises(ConfigError) as caught:
            parse_config(text, env={})
        return str(caught.value)

    dotted = message(config_text(set_in("mirrors", 0, "source", "bootstrap.servers", value="k")))
    assert dotted.startswith('mirrors[0].source["bootstrap.servers"]: unknown field; keys are kebab-case: did you mean')
    assert "bootstrap-servers?" in dotted and "expected one of" not in dotted
    typo = message(config_text(set_in("destination", "compresion", value="zstd")))
    assert typo.startswith("destination.compresion: unknown field; did you mean compression?"), typo
    near = message(config_text(set_in("mirrors", 0, "source", "isolation-level", value="read_comitted")))
    assert "did you mean read_committed?" in near, near
    sasl = {"protocol": "SASL_SSL", "sasl": {"mechanism": "GSSAPI", "username": "u", "password-env": "P"}}
    kerberos = message(config_text(set_in("mirrors", 0, "source", "security", value=sasl)))
    assert "GSSAPI is not supported: the bundled Kafka client is built without Kerberos; use SCRAM-SHA-512" in kerberos
    assert kerberos.startswith("mirrors[0].source.security.sasl.mechanism: "), kerberos
    for bucket, spelled in (
        ("s3://my-archive", "bucket: my-archive"),
        ("my-archive/prod", "bucket: my-archive, prefix: prod"),
    ):
        s3 = {"type": "s3", "bucket": bucket}
        refused = message(config_text(set_in("destination", value=s3)))
        assert refused.startswith(f"destination.bucket: the bucket's name alone, not a URL or path: {spelled}"), refused


def test_every_problem_of_a_file_comes_at_once_in_its_order() -> None:
    """Unknown keys, values outside their choices and missing fields are all named (each with its line and what
    was meant; a key taken for a misspelt one is not also missing), then the first other problem decoding meets;
    one problem stays a plain ConfigError."""

    def typos(data: dict[str, Any]) -> None:
        data["destination"]["compresion"] = "zstd"
        data["mirrors"][0]["source"]["isolation-level"] = "read_comitted"
        data["mirrors"][1]["source"]["bootstrap.servers"] = data["mirrors"][1]["source"].pop("bootstrap-servers")
        data["mirrors"][1]["partition"] = -1

    with pytest.raises(ConfigErrors) as caught:
        parse_config(config_text(typos))
    found = [(format_path(e.path or ()), e.problem, e.line) for e in caught.value.errors]
    assert found == [
        ("destination.compresion", "unknown field; did you mean compression?", 4),
        (
            "mirrors[0].source.isolation-level",
            "invalid value 'read_comitted': did you mean read_committed? (one of: read_committed, read_uncommitted)",
            9,
        ),
        (
            'mirrors[1].source["bootstrap.servers"]',
            "unknown field; keys are kebab-case: did you mean bootstrap-servers?",
            14,
        ),
        ("mirrors[1].partition", "Expected int >= 0, got -1", 16),
    ], found
    first = "destination.compresion: unknown field; did you mean compression? (line 4)"
    assert str(caught.value).splitlines()[0] == first and len(str(caught.value).splitlines()) == 4
    with pytest.raises(ConfigError) as one:
        parse_config(config_text(set_in("destination", "compresion", value="zstd")))
    assert not isinstance(one.value, ConfigErrors) and one.value.where == ("destination", "compresion")
